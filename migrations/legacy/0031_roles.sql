-- The roles, and what they may do in the schema: the first half of the
-- baseline (0031-0032), run as the login that migrates, before anything is
-- created (db::migrate runs every later migration as ledger_owner).
--
--   ledger_owner      owns every object of the ledger and runs the migrations
--                     (db::migrate switches to it); not a superuser
--   ledger_api        the HTTP API: inserts pending commands and holds, decides
--                     holds, cancels, reads; nothing else
--   ledger_custodian  custodians and recovery: leases, the transitions from
--                     pending on (never to cancelled); no insert, no delete
--   ledger_inspector  reads everything but token hashes; writes nothing
--   ledger_retention  prunes, through prune_commands() only
--
-- Roles are global to the cluster while the ledger lives in one database, so
-- they are created only when missing (one cluster may hold many ledger
-- databases, such as the tests' one per test: they share the roles, each
-- database grants them its own objects). They are created NOLOGIN: who may
-- log in as which, with which password, is set outside migrations
-- (`command-ledger role-password`, or the private cluster, which does it with
-- random passwords). The engine's role, ledger_engine, is made by
-- `command-ledger migrate` itself (see 0032 and docs/SECURITY.md).
--
-- A database migrated before the baseline ran the same statements as 0016
-- (migrations/legacy/): db::migrate finishes that chain and records 0031 and
-- 0032 as applied instead of running them.

-------------------------------------------------------------------------------
-- The roles, created when missing.
-------------------------------------------------------------------------------

do $migration$
declare
    wanted constant text[] := array['ledger_owner', 'ledger_api', 'ledger_custodian',
                                    'ledger_inspector', 'ledger_retention'];
    missing text[];
    r text;
    can_create boolean;
    is_super boolean;
begin
    select array_agg(w order by w) into missing
    from unnest(wanted) w
    where not exists (select 1 from pg_roles where rolname = w);
    select rolcreaterole, rolsuper into can_create, is_super from pg_roles where rolname = current_user;
    if missing is not null then
        if not (can_create or is_super) then
            raise exception 'the roles % do not exist, and % may not create them (it has no CREATEROLE)',
                array_to_string(missing, ', '), current_user
                using errcode = 'CL010',
                      hint = format('Have an administrator run, once per cluster: %s; then grant %s to %I; '
                                    'then migrate again (docs/SECURITY.md, "Roles").',
                                    (select string_agg(format('create role %I nologin', m), '; ') from unnest(missing) m),
                                    array_to_string(wanted, ', '), current_user);
        end if;
        foreach r in array missing loop
            execute format('create role %I nologin', r);
        end loop;
    end if;
    -- Whoever migrates acts as the owner (db::migrate sets the role) and may
    -- act as each service role (a service given only this URL sets theirs).
    if not is_super then
        foreach r in array wanted loop
            if not pg_has_role(current_user, r, 'member') then
                begin
                    execute format('grant %I to %I', r, current_user);
                exception when insufficient_privilege then
                    raise exception '% is not a member of %, and may not make itself one', current_user, r
                        using errcode = 'CL010',
                              hint = format('Have an administrator run: grant %s to %I; then migrate again.',
                                            array_to_string(wanted, ', '), current_user);
                end;
            end if;
        end loop;
    end if;
end
$migration$;

-------------------------------------------------------------------------------
-- Nothing for PUBLIC; the owner creates in the schema.
-------------------------------------------------------------------------------

grant usage, create on schema public to ledger_owner;
grant usage on schema public to ledger_api, ledger_custodian, ledger_inspector, ledger_retention;


-- The migrations' own record is the owner's, as everything after it.
alter table _sqlx_migrations owner to ledger_owner;
-- Each service reads it to tell whether its database is current (/readyz).
grant select on _sqlx_migrations to ledger_api, ledger_custodian, ledger_inspector, ledger_retention;
