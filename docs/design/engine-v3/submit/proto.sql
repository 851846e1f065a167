-- A prototype measured by submit/ab.sh, NOT in the service: the submit side
-- of the write path as an engine step (engine-v3.md, "The write path
-- proposed": ledger_submit). Applied by hand with psql to a scratch database
-- migrated to 0034; every round that uses it rolls back.
--
-- Today an insert into commands fires, per statement: commands_guard (a
-- PL/pgSQL row trigger: the command created pending and the immutable
-- columns' rules, 0034), commands_record_inserts (a statement trigger over
-- the transition table: the pending entry with a row-v1 digest of the whole
-- row, its entry hash, and the queue row), and command_history_counts on
-- that entry's insert.
--
-- proto_submit(n) inserts the same n commands as submit/insert.sql (the same
-- generator, so only the write path differs) in one statement of
-- data-modifying CTEs, as ledger_engine, so none of those triggers runs: the
-- rules checked set-based (a violation raises, as the guard would), the
-- identity digest computed once and stored (the claim then reads it instead
-- of computing it), the pending entry's row digest row-v2 over it, the entry
-- hash, and the queue rows. Nothing is counted: pending entries are not
-- counted today either.

grant insert on commands, command_queue to ledger_engine;

-- The insert's statement trigger skips the engine, as the others do since 0030.
drop trigger commands_record_inserts on commands;
create trigger commands_record_inserts after insert on commands
    referencing new table as new_rows for each statement
    when (current_user <> 'ledger_engine') execute function commands_record_inserts();

create or replace function proto_refuse(p_id uuid) returns boolean
language plpgsql as $fn$
begin
    raise exception 'command % breaks a rule of commands'' immutable columns', p_id
        using errcode = 'check_violation';
end;
$fn$;

create or replace function proto_submit(p_n integer) returns integer
language plpgsql security definer
set search_path to 'public', 'pg_temp'
set enable_seqscan to 'off'
as $fn$
declare
    at timestamptz := now();
    who text := ledger_actor();
    why text := ledger_reason();
    n integer;
begin
    with src as materialized (
        select gen_random_uuid() as id, '00000000-0000-0000-0000-000000000001'::uuid as scope,
               'x-' || g || random()::text as key, sha256(('r' || g)::bytea) as request_digest,
               3::smallint as digest_version, 'refund'::text as kind, 'proto'::text as authority_id,
               null::text as run_id,
               jsonb_build_object('to', 'ada' || g || '@example.com', 'amount', '12.00 USD') as args,
               jsonb_build_object('kind', 'refund', 'authority', 'proto',
                                  'args', jsonb_build_object('to', 'ada' || g || '@example.com',
                                                             'amount', jsonb_build_object('amount_minor', 1200,
                                                                                          'currency', 'USD')))
                   as canonical,
               null::timestamptz as deadline_at, null::bigint as pinned_generation,
               sha256(('i' || g)::bytea) as intent_digest, '{money@/amount}'::text[] as rules,
               null::integer as intent_epoch, null::uuid as retry_of, null::timestamptz as not_before,
               0::smallint as priority
        from generate_series(1, p_n) g
    ),
    checked as materialized (
        select s.*,
               ledger_identity_digest(s.id, s.scope, s.key, s.request_digest, s.digest_version, s.kind,
                                      s.authority_id, s.run_id, s.args, s.canonical, at, s.deadline_at,
                                      s.pinned_generation, s.intent_digest, s.rules, s.intent_epoch) as identity
        from src s
        where coalesce(s.authority_id ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$', true)
              and coalesce(s.kind ~ '^[a-z][a-z0-9_.-]{0,63}$', true)
              and coalesce(octet_length(s.key) between 1 and 255, true)
              and coalesce(octet_length(s.request_digest) = 32, true)
              and coalesce(s.intent_digest is null or octet_length(s.intent_digest) = 32, true)
              and coalesce(s.intent_epoch > 0, true)
              and coalesce(s.pinned_generation >= 0, true)
              and coalesce(s.priority between -100 and 100, true)
              or proto_refuse(s.id)
    ),
    ins as (
        insert into commands (id, scope, idempotency_key, request_digest, digest_version, kind, authority_id,
                              run_id, args, canonical, created_at, updated_at, deadline_at, pinned_generation,
                              intent_digest, canonical_rules, intent_epoch, retry_of, not_before, priority,
                              identity_digest)
        select c.id, c.scope, c.key, c.request_digest, c.digest_version, c.kind, c.authority_id, c.run_id,
               c.args, c.canonical, at, at, c.deadline_at, c.pinned_generation, c.intent_digest, c.rules,
               c.intent_epoch, c.retry_of, c.not_before, c.priority, c.identity
        from checked c
        returning id, authority_id, identity_digest, created_at, not_before, priority
    ),
    digested as materialized (
        select i.*, ledger_row_digest_v2(i.identity_digest, 'pending', null, null, null, null) as digest
        from ins i
    ),
    entries as (
        insert into command_history (authority_id, command_id, from_state, to_state, at, actor,
                                     authority_generation, reason, row_digest, prev_hash, hash)
        select d.authority_id, d.id, null, 'pending', at, who, null, why, d.digest, null,
               ledger_entry_hash(null, d.id, null, 'pending', at, who, null, why, d.digest)
        from digested d
        order by d.id
        returning 1
    ),
    queued as (
        insert into command_queue (authority_id, id, rank, ready_at)
        select d.authority_id, d.id, ledger_claim_rank(d.created_at, d.not_before, d.priority), d.not_before
        from digested d
        returning 1
    )
    select count(*) into n from digested
    where (select count(*) from entries) >= 0 and (select count(*) from queued) >= 0;
    return n;
end;
$fn$;
alter function proto_submit(integer) owner to ledger_engine;
