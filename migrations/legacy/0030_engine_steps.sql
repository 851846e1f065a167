-- The custodian's hot path as two set-based steps (engine v3,
-- docs/design/engine-v3.md), on one node.
--
-- Before: each of the custodian's three transitions (claim, start, record)
-- was an UPDATE of commands that fired the guard per row and a statement
-- trigger that paired old and new rows, wrote the history entries (a row-v1
-- digest of every column each), checked their foreign key and kept the queue
-- and in-flight tables: about 110 us a command and transition.
--
-- Now: ledger_claim_start() takes a leased authority's oldest queued
-- commands from pending through prepared to effect_started (or expired) in
-- one statement and one transaction, and ledger_record_outcomes() records
-- their outcomes; each writes its rows' history entries itself, chained,
-- in one INSERT ... SELECT, and keeps the queue and in-flight tables. Every
-- state change is still an entry (pending -> prepared and prepared ->
-- effect_started are two entries of one commit), hashed as before
-- (entry-v1); the entries' row digests are row-v2: the immutable columns
-- hashed once per command (commands.identity_digest) and, per entry, the
-- columns a transition changes.
--
-- The two functions run as ledger_engine, a role nobody can log in as or act
-- as (NOLOGIN; the migrating login is its member only while migrations run,
-- src/db/roles.rs). The triggers that do the same work for every other
-- writer skip only what runs as ledger_engine: WHEN (current_user <>
-- 'ledger_engine'). Service roles keep their UPDATE for the rare paths
-- (cancel, adoption, stale prepared rows); the owner's hand-typed SQL meets
-- the guard and the history trigger as before.
--
-- The history's foreign key to commands goes: its check cost about 10 us an
-- entry, and what it bought is kept otherwise: entries are written by the
-- triggers and these functions only, from rows the same statement changed;
-- a deleted (archived) command takes its history with it by a statement
-- trigger instead of the cascade; verify reports an entry without a command
-- (orphan_history).
--
-- Citus keeps the trigger path (0019, 0022) unchanged: nothing below is
-- installed when the citus extension is present.

-------------------------------------------------------------------------------
-- row-v2: the immutable columns once, the changing ones per entry. Both
-- texts are rebuilt independently by src/db/verify.rs.
-------------------------------------------------------------------------------

alter table commands add column identity_digest bytea
    constraint commands_identity_digest_is_sha256 check (identity_digest is null or octet_length(identity_digest) = 32);
comment on column commands.identity_digest is
    'SHA-256 of the immutable columns (identity-v2, ledger_identity_digest), written by the first engine step that '
    'moves the command (0030); row-v2 history digests cover it and the columns a transition changes. A cache: '
    'verify recomputes it from the columns and never reads it.';

create function ledger_identity_digest(id uuid, scope uuid, idempotency_key text, request_digest bytea,
                                       digest_version integer, kind text, authority_id text, run_id text,
                                       args jsonb, canonical jsonb, created_at timestamptz,
                                       deadline_at timestamptz, pinned_generation bigint, intent_digest bytea,
                                       canonical_rules text[], intent_epoch integer)
returns bytea language sql stable parallel safe as $$
    select sha256(convert_to(jsonb_build_array(
        'identity-v2', id, scope, idempotency_key, encode(request_digest, 'hex'), digest_version, kind,
        authority_id, run_id, args, canonical,
        to_char(created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        to_char(deadline_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        pinned_generation, encode(intent_digest, 'hex'), canonical_rules, intent_epoch)::text, 'UTF8'))
$$;
comment on function ledger_identity_digest(uuid, uuid, text, bytea, integer, text, text, text, jsonb, jsonb,
                                           timestamptz, timestamptz, bigint, bytea, text[], integer) is
    'identity-v2: SHA-256 of the JSON array of a command''s immutable columns (row-v1''s columns but for state, '
    'generation, result, error and finished_at).';

create function ledger_row_digest_v2(identity bytea, state text, generation bigint, result jsonb, error jsonb,
                                     finished_at timestamptz)
returns bytea language sql stable parallel safe as $$
    select sha256(convert_to(jsonb_build_array(
        'row-v2', encode(identity, 'hex'), state, generation, result, error,
        to_char(finished_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))::text, 'UTF8'))
$$;
comment on function ledger_row_digest_v2(bytea, text, bigint, jsonb, jsonb, timestamptz) is
    'row-v2: SHA-256 of the JSON array of the identity-v2 digest (hex) and the columns a transition changes. '
    'Written by the engine steps (0030); verify accepts row-v1 or row-v2 for a command''s last entry.';

-- The guard keeps the cache honest against hand-typed SQL (the engine, which
-- writes it, does not pass through the guard).
create or replace function commands_identity_digest_immutable() returns trigger
language plpgsql security definer set search_path = public, pg_temp as $$
begin
    raise exception 'command % identity digest is written by the engine only', old.id
        using errcode = 'CL003';
end;
$$;
comment on function commands_identity_digest_immutable() is
    'Refuses any change to commands.identity_digest by a statement that does not run as ledger_engine (CL003).';

do $migration$
declare
    one_node boolean := not exists (select 1 from pg_extension where extname = 'citus');
begin
    if not one_node then
        raise notice 'citus: the engine steps are not installed; custodians keep the trigger path';
        return;
    end if;
    if not exists (select 1 from pg_roles where rolname = 'ledger_engine')
       or not pg_has_role(current_user, 'ledger_engine', 'member') then
        raise exception 'migration 0030 needs the role ledger_engine and the migrating role as its member'
            using errcode = 'CL010',
                  hint = 'Migrate with `command-ledger migrate`, which creates the role and makes the owner its '
                         'member while migrations run; or have an administrator run: create role ledger_engine '
                         'nologin; grant ledger_engine to ' || quote_ident(current_user)
                         || '; then migrate again, then: revoke ledger_engine from ' || quote_ident(current_user);
    end if;

    create trigger commands_identity_digest_kept
        before update of identity_digest on commands
        for each row when (current_user <> 'ledger_engine' and new.identity_digest is distinct from old.identity_digest)
        execute function commands_identity_digest_immutable();

    -- The engine's rights: its four tables, the authorities it fences on,
    -- the history's sequence and the counters.
    grant usage on schema public to ledger_engine;
    grant select, update on commands to ledger_engine;
    grant select, insert on command_history to ledger_engine;
    grant select, update, delete on command_queue to ledger_engine;
    grant select, insert, delete on command_in_flight to ledger_engine;
    -- Locking a row (the lease, for share) needs an UPDATE right on a column.
    grant select, update (lease_holder) on authorities to ledger_engine;
    grant usage on sequence command_history_id_seq to ledger_engine;
    grant select, insert, update on ledger_counts to ledger_engine;
    create policy commands_engine on commands for all to ledger_engine using (true) with check (true);

    -- Every trigger that does the engine's work for other writers skips it.
    drop trigger commands_guard on commands;
    create trigger commands_guard before insert or delete or update on commands
        for each row when (current_user <> 'ledger_engine') execute function commands_guard();
    drop trigger commands_record_changes on commands;
    create trigger commands_record_changes after update on commands
        referencing old table as old_rows new table as new_rows
        for each statement when (current_user <> 'ledger_engine') execute function commands_record_changes();
    drop trigger command_history_counts on command_history;
    create trigger command_history_counts after insert on command_history
        referencing new table as new_rows
        for each statement when (current_user <> 'ledger_engine') execute function ledger_count_history();
    drop trigger command_queue_follows_commands on command_queue;
    create trigger command_queue_follows_commands before insert or delete or update or truncate on command_queue
        for each statement when (current_user <> 'ledger_engine') execute function refuse_direct_work_change();
    drop trigger command_in_flight_follows_commands on command_in_flight;
    create trigger command_in_flight_follows_commands before insert or delete or update or truncate on command_in_flight
        for each statement when (current_user <> 'ledger_engine') execute function refuse_direct_work_change();

    -- The history leaves with its (archived) command by this trigger, not by
    -- the foreign key's cascade.
    alter table command_history drop constraint command_history_command_id_fkey;
end
$migration$;

create function commands_history_leaves() returns trigger
language plpgsql security definer set search_path = public, pg_temp as $$
begin
    delete from command_history h
    using old_rows o
    where h.authority_id = o.authority_id and h.command_id = o.id;
    return null;
end;
$$;
comment on function commands_history_leaves() is
    'After a delete of commands (prune_commands(), which archives each with its history first): their history '
    'entries go too (one node; the foreign key''s cascade did this before 0030).';

do $migration$
begin
    if not exists (select 1 from pg_extension where extname = 'citus') then
        create trigger commands_history_leaves after delete on commands
            referencing old table as old_rows
            for each statement execute function commands_history_leaves();
    end if;
end
$migration$;

-------------------------------------------------------------------------------
-- The steps.
-------------------------------------------------------------------------------

-- Claim and start: up to p_limit queued commands of the authorities p_holder
-- leases, lowest claim rank first, each moved pending -> prepared ->
-- effect_started under the lease's generation (two entries), or pending ->
-- expired (one entry) when its deadline passed or its pinned generation is
-- not the lease's. Rows another transaction holds (a cancel) are skipped.
-- Fenced by the lease row held for share (a takeover waits for the commit),
-- as the claim always was: the custodian runs it at its claim isolation
-- (READ COMMITTED by default). effect_started is durable when it commits,
-- before any effect.
create function ledger_claim_start(p_authorities text[], p_holder text, p_limit integer)
returns setof commands
language plpgsql security definer set search_path = public, pg_temp set enable_seqscan = off as $$
declare
    at timestamptz := now();
    who text := ledger_actor();
    why text := ledger_reason();
begin
    return query
    with lease as materialized (
        -- Shared lock: a takeover of the lease waits until this commits.
        select a.id, a.generation from authorities a
        where a.id = any(p_authorities) and a.lease_holder = p_holder and a.lease_expires_at > at
        for share
    ),
    queued as materialized (
        -- Per leased authority, its first claimable commands. The lease
        -- admits one claimer per authority; the command rows are locked
        -- below, skipping any another transaction holds (a cancel).
        select l.id as authority_id, q.id, l.generation
        from lease l
        cross join lateral (
            select q.id from command_queue q
            where q.authority_id = l.id and (q.ready_at is null or q.ready_at <= at)
            order by q.rank, q.id
            limit p_limit
        ) q
        limit p_limit
    ),
    pending as materialized (
        select c.authority_id, c.id, qd.generation,
               case
                   when c.deadline_at <= at then 'deadline_passed'
                   when c.pinned_generation < qd.generation then 'authority_superseded'
                   when c.pinned_generation > qd.generation then 'generation_not_current'
               end as expiry,
               coalesce(c.identity_digest,
                        ledger_identity_digest(c.id, c.scope, c.idempotency_key, c.request_digest,
                                               c.digest_version, c.kind, c.authority_id, c.run_id, c.args,
                                               c.canonical, c.created_at, c.deadline_at, c.pinned_generation,
                                               c.intent_digest, c.canonical_rules, c.intent_epoch)) as identity,
               (select h.hash from command_history h where h.command_id = c.id
                order by h.command_id desc, h.id desc limit 1) as prev
        from queued qd
        join commands c on c.authority_id = qd.authority_id and c.id = qd.id
        where c.state = 'pending'
        for update of c skip locked
    ),
    dequeued as (
        -- By key, one probe a row.
        delete from command_queue q
        where q.authority_id = any(p_authorities) and q.id = any (array(select p.id from pending p))
        returning 1
    ),
    moved as (
        update commands c
        set state = case when v.expiry is null then 'effect_started' else 'expired' end,
            authority_generation = case when v.expiry is null then v.generation else c.authority_generation end,
            error = case when v.expiry is not null then
                        jsonb_build_object('reason', v.expiry, 'pinned_generation', c.pinned_generation,
                                           'authority_generation', v.generation)
                    end,
            finished_at = case when v.expiry is not null then at end,
            identity_digest = v.identity,
            updated_at = at
        from pending v
        where c.authority_id = v.authority_id and c.id = v.id
        returning c as r, v.prev
    ),
    first as materialized (
        -- The entry out of pending: to prepared, or to expired.
        select (m.r).authority_id as authority_id, (m.r).id as id, (m.r).state as state,
               (m.r).authority_generation as generation, (m.r).identity_digest as identity, m.prev,
               case when (m.r).state = 'expired' then 'expired' else 'prepared' end as to_state,
               coalesce(why, (m.r).error ->> 'reason') as reason,
               ledger_row_digest_v2((m.r).identity_digest,
                                    case when (m.r).state = 'expired' then 'expired' else 'prepared' end,
                                    (m.r).authority_generation, null, (m.r).error, (m.r).finished_at) as digest
        from moved m
    ),
    first_hashed as materialized (
        select f.*, ledger_entry_hash(f.prev, f.id, 'pending', f.to_state, at, who, f.generation, f.reason,
                                      f.digest) as hash
        from first f
    ),
    second as materialized (
        -- The entry out of prepared, for the started ones.
        select f.authority_id, f.id, f.generation, why as reason, f.hash as prev,
               ledger_row_digest_v2(f.identity, 'effect_started', f.generation, null, null, null) as digest
        from first_hashed f
        where f.state = 'effect_started'
    ),
    entries as (
        insert into command_history (authority_id, command_id, from_state, to_state, at, actor,
                                     authority_generation, reason, row_digest, prev_hash, hash)
        select e.authority_id, e.id, e.from_state, e.to_state, at, who, e.generation, e.reason,
               e.digest, e.prev, e.hash
        from (
            select f.authority_id, f.id, 1 as step, 'pending' as from_state, f.to_state, f.generation,
                   f.reason, f.digest, f.prev, f.hash
            from first_hashed f
            union all
            select s.authority_id, s.id, 2, 'prepared', 'effect_started', s.generation, s.reason, s.digest,
                   s.prev,
                   ledger_entry_hash(s.prev, s.id, 'prepared', 'effect_started', at, who, s.generation,
                                     s.reason, s.digest)
            from second s
        ) e
        order by e.id, e.step
        returning 1
    ),
    flying as (
        insert into command_in_flight (authority_id, id)
        select f.authority_id, f.id from first f where f.state = 'effect_started'
        returning 1
    ),
    counted as (
        -- What the history's counting trigger adds for other writers.
        insert into ledger_counts (minute, counter, source, n)
        select date_trunc('minute', at), 'executions', 'pg:' || pg_backend_pid(), count(*)
        from first f
        where f.state = 'effect_started'
        having count(*) > 0
        on conflict (minute, counter, source) do update set n = ledger_counts.n + excluded.n
        returning 1
    ),
    finished as (
        select pg_notify('command_ledger_outcome', f.id::text) from first f where f.state = 'expired'
    )
    select (m.r).* from moved m
    where (select count(*) from dequeued) >= 0 and (select count(*) from entries) >= 0
      and (select count(*) from flying) >= 0 and (select count(*) from counted) >= 0
      and (select count(*) from finished) >= 0;
end;
$$;
comment on function ledger_claim_start(text[], text, integer) is
    'Engine step (0030): up to p_limit queued commands of the authorities p_holder leases, lowest claim rank '
    'first, moved pending -> prepared -> effect_started under the lease''s generation (two history entries), or '
    'pending -> expired (deadline passed, pinned generation not the lease''s), with the queue and in-flight tables '
    'kept. Returns the rows as they now are. Fenced by the lease row held for share; no effect starts before '
    'it commits.';

-- Record: the outcomes of started commands (a JSON array of {id, state,
-- result, error}), only while p_authority is at p_generation. Returns the ids
-- recorded; a missing one was fenced out or is no longer effect_started.
create function ledger_record_outcomes(p_authority text, p_generation bigint, p_outcomes jsonb)
returns setof uuid
language plpgsql security definer set search_path = public, pg_temp set enable_seqscan = off as $$
declare
    at timestamptz := now();
    who text := ledger_actor();
    why text := ledger_reason();
begin
    return query
    with outcome as materialized (
        select o.id, o.state, o.result, o.error
        from jsonb_to_recordset(p_outcomes) as o (id uuid, state text, result jsonb, error jsonb)
        where o.state in ('applied', 'failed', 'ambiguous')
    ),
    fenced as materialized (
        select o.*,
               (select h.hash from command_history h where h.command_id = o.id
                order by h.command_id desc, h.id desc limit 1) as prev
        from outcome o
        join commands c on c.authority_id = p_authority and c.id = o.id
        join authorities a on a.id = p_authority and a.generation = p_generation
        where c.state = 'effect_started' and c.authority_generation = p_generation
        for update of c
    ),
    moved as (
        update commands c
        set state = f.state,
            result = case when f.state = 'applied' then f.result end,
            error = f.error,
            finished_at = at,
            identity_digest = coalesce(c.identity_digest,
                                       ledger_identity_digest(c.id, c.scope, c.idempotency_key, c.request_digest,
                                                              c.digest_version, c.kind, c.authority_id, c.run_id,
                                                              c.args, c.canonical, c.created_at, c.deadline_at,
                                                              c.pinned_generation, c.intent_digest,
                                                              c.canonical_rules, c.intent_epoch)),
            updated_at = at
        from fenced f
        where c.authority_id = p_authority and c.id = f.id
        returning c.id, c.state, c.authority_generation, c.result, c.error, c.identity_digest, c.created_at, f.prev
    ),
    digested as materialized (
        select m.*, coalesce(why, m.error ->> 'reason') as reason,
               ledger_row_digest_v2(m.identity_digest, m.state, m.authority_generation, m.result, m.error, at)
                   as digest
        from moved m
    ),
    entries as (
        insert into command_history (authority_id, command_id, from_state, to_state, at, actor,
                                     authority_generation, reason, row_digest, prev_hash, hash)
        select p_authority, d.id, 'effect_started', d.state, at, who, d.authority_generation, d.reason, d.digest,
               d.prev,
               ledger_entry_hash(d.prev, d.id, 'effect_started', d.state, at, who, d.authority_generation,
                                 d.reason, d.digest)
        from digested d
        order by d.id
        returning 1
    ),
    landed as (
        -- By key, one probe a row (a join with the CTE rescans it per row).
        delete from command_in_flight f
        where f.authority_id = p_authority and f.id = any (array(select m.id from moved m))
        returning 1
    ),
    counted as (
        -- What the history's counting trigger adds for other writers: each
        -- outcome, and each applied command's latency bucket.
        insert into ledger_counts (minute, counter, source, n)
        select date_trunc('minute', at), k.counter, 'pg:' || pg_backend_pid(), count(*)
        from (
            select d.state as counter from digested d
            union all
            select ledger_latency_bucket(extract(epoch from (at - d.created_at)) * 1000)
            from digested d where d.state = 'applied'
        ) k
        group by k.counter
        on conflict (minute, counter, source) do update set n = ledger_counts.n + excluded.n
        returning 1
    ),
    told as (
        select pg_notify('command_ledger_outcome', m.id::text) from moved m
    )
    select m.id from moved m
    where (select count(*) from entries) >= 0 and (select count(*) from landed) >= 0
      and (select count(*) from counted) >= 0 and (select count(*) from told) >= 0;
end;
$$;
comment on function ledger_record_outcomes(text, bigint, jsonb) is
    'Engine step (0030): records the outcomes (a JSON array of {id, state, result, error}; state applied, failed '
    'or ambiguous) of p_authority''s effect_started commands, only while the authority is at p_generation, with '
    'one history entry each, the in-flight rows removed and a NOTIFY command_ledger_outcome each. Returns the ids '
    'recorded. Run it in a SERIALIZABLE transaction.';

-- Only the engine may run them as themselves: owned by ledger_engine, run by
-- the custodian. On Citus they are not kept (the trigger path runs there).
do $migration$
begin
    if exists (select 1 from pg_extension where extname = 'citus') then
        drop function ledger_claim_start(text[], text, integer);
        drop function ledger_record_outcomes(text, bigint, jsonb);
    else
        alter function ledger_claim_start(text[], text, integer) owner to ledger_engine;
        alter function ledger_record_outcomes(text, bigint, jsonb) owner to ledger_engine;
        revoke all on function ledger_claim_start(text[], text, integer) from public;
        revoke all on function ledger_record_outcomes(text, bigint, jsonb) from public;
        grant execute on function ledger_claim_start(text[], text, integer) to ledger_custodian;
        grant execute on function ledger_record_outcomes(text, bigint, jsonb) to ledger_custodian;
    end if;
end
$migration$;
