-- 0041: the functions' and views' texts live in files of their own.
--
-- Until now a migration that changed a function wrote it whole again (0037
-- alone holds 1,203 lines for a handful of changed ones). From here on every
-- function, trigger function and view of the schema has one file holding its
-- current text, migrations/functions/<name>.sql (and <name>.citus.sql where
-- a Citus database holds another text, or none), and `command-ledger
-- migrate` applies a file after the versioned migrations whenever its text
-- is not the one this table records: a change to a function is a change to
-- its file, reviewed as that file's diff. A run that applied a versioned
-- migration applies every file again (a migration may have replaced a
-- function the file still holds).

create table ledger_function_sources (
    name text primary key,
    file text not null,
    checksum bytea not null,
    applied_at timestamptz not null default now()
);

comment on table ledger_function_sources is
    'The files of migrations/functions applied to this database: for each function or view, the file (by layout: <name>.sql, or <name>.citus.sql on Citus) whose text it now holds, that text''s SHA-256, and when `command-ledger migrate` applied it. Written by migrate only.';
comment on column ledger_function_sources.name is
    'The function''s or view''s name (the file''s name without its layout and extension).';
comment on column ledger_function_sources.file is
    'The file applied, migrations/functions/<file>.';
comment on column ledger_function_sources.checksum is
    'SHA-256 of the file''s text as applied: a file whose text differs is applied again.';
comment on column ledger_function_sources.applied_at is
    'When the file was last applied.';

grant select on ledger_function_sources to ledger_api, ledger_custodian, ledger_inspector, ledger_retention;
