-- The engine-v3 prototype (a measurement, not a migration): each custodian
-- step is one SECURITY DEFINER function, owned by a role nobody logs in as
-- (ledger_engine), that changes its batch's rows and writes their history
-- entries, queue, in-flight and counter rows itself, set-based. The
-- triggers stay for every other writer, and skip only what the engine
-- itself runs: each has WHEN (current_user <> 'ledger_engine'), and
-- current_user is ledger_engine only inside its functions (a role no
-- session can log in as or SET ROLE to: no member, NOLOGIN).
--
-- Claim and start are one step, one transaction: pending -> prepared ->
-- effect_started in one update, the two history entries chained in one
-- insert. row-v2 digests hash the immutable columns once (identity_digest,
-- at insert) and per entry only the columns a transition changes.
do $$ begin
    if not exists (select 1 from pg_roles where rolname = 'ledger_engine') then
        create role ledger_engine nologin;
    end if;
end $$;
grant select, insert, update, delete on commands, command_history, command_queue, command_in_flight,
      authorities, ledger_counts to ledger_engine;
grant usage on all sequences in schema public to ledger_engine;
drop policy if exists commands_engine on commands;
create policy commands_engine on commands for all to ledger_engine using (true) with check (true);

-- row-v2: the immutable columns, hashed once.
alter table commands add column if not exists identity_digest bytea;
set session_replication_role = replica;
update commands set identity_digest = sha256(convert_to(jsonb_build_array(
        'identity-v2', id, scope, idempotency_key, encode(request_digest, 'hex'), digest_version,
        kind, authority_id, run_id, args, canonical, ledger_utc(created_at), ledger_utc(deadline_at),
        pinned_generation, encode(intent_digest, 'hex'), canonical_rules, intent_epoch)::text, 'UTF8'))
where identity_digest is null;
set session_replication_role = origin;

create or replace function ledger_row_digest_v2(identity bytea, state text, generation bigint,
                                                result jsonb, error jsonb, finished_at timestamptz)
returns bytea language sql immutable parallel safe as $$
    select sha256(convert_to(concat_ws(E'\n', 'row-v2', encode(identity, 'hex'), state, generation::text,
                                       result::text, error::text,
                                       to_char(finished_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')),
                             'UTF8'))
$$;

-- The history's foreign key to commands: a check per entry (about 10 us a
-- row on a quiet machine) that buys nothing the engine does not already
-- guarantee: entries are written only by definer functions, from the rows
-- the same statement changed, and a command leaves only with its history
-- (prune_authority, command_history_delete_guard).
alter table command_history drop constraint if exists command_history_command_id_fkey;

-- The triggers skip the engine's own statements.
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
create trigger command_queue_follows_commands before insert or delete or update on command_queue
    for each statement when (current_user <> 'ledger_engine') execute function refuse_direct_work_change();
drop trigger command_in_flight_follows_commands on command_in_flight;
create trigger command_in_flight_follows_commands before insert or delete or update on command_in_flight
    for each statement when (current_user <> 'ledger_engine') execute function refuse_direct_work_change();

-- Claim and start: the oldest queued commands of a leased authority go to
-- effect_started (or expired), with their two entries each.
create or replace function ledger_claim_start(p_authority text, p_holder text, p_batch int)
returns table (id uuid, state text)
language plpgsql security definer set search_path = public, pg_temp set enable_seqscan = off as $$
declare
    g bigint;
    at timestamptz := now();
    who text := ledger_actor();
begin
    select a.generation into g from authorities a
    where a.id = p_authority and a.lease_holder = p_holder and a.lease_expires_at > at
    for share;
    if g is null then
        return;
    end if;
    return query
    with taken as (
        delete from command_queue q
        where q.authority_id = p_authority
          and q.id in (select q2.id from command_queue q2 where q2.authority_id = p_authority
                       order by q2.id limit p_batch for update skip locked)
        returning q.id
    ),
    moved as (
        update commands c
        set state = case when c.deadline_at <= at or c.pinned_generation <> g then 'expired' else 'effect_started' end,
            authority_generation = case when c.deadline_at <= at or c.pinned_generation <> g
                                        then c.authority_generation else g end,
            error = case when c.deadline_at <= at then '{"reason": "deadline_passed"}'::jsonb
                         when c.pinned_generation <> g then '{"reason": "authority_superseded"}'::jsonb end,
            finished_at = case when c.deadline_at <= at or c.pinned_generation <> g then at end,
            updated_at = at
        from taken t
        where c.authority_id = p_authority and c.id = t.id and c.state = 'pending'
        returning c.id, c.state, c.authority_generation, c.error, c.finished_at, c.identity_digest
    ),
    chained as (
        select m.*, p.hash as prev
        from moved m
        cross join lateral (select h.hash from command_history h where h.command_id = m.id
                            order by h.command_id desc, h.id desc limit 1) p
        offset 0
    ),
    first as (
        select c.*, case when c.state = 'expired' then 'expired' else 'prepared' end as to1,
               ledger_row_digest_v2(c.identity_digest, case when c.state = 'expired' then 'expired' else 'prepared' end,
                                    c.authority_generation, null, c.error, c.finished_at) as d1
        from chained c
        offset 0
    ),
    hashed as (
        select f.*, ledger_entry_hash(f.prev, f.id, 'pending', f.to1, at, who, f.authority_generation,
                                      f.error ->> 'reason', f.d1) as h1
        from first f
        offset 0
    ),
    entries as (
        insert into command_history (authority_id, command_id, from_state, to_state, at, actor,
                                     authority_generation, reason, row_digest, prev_hash, hash)
        select p_authority, h.id, e.from_state, e.to_state, at, who, h.authority_generation, e.reason,
               e.digest, e.prev, e.hash
        from hashed h
        cross join lateral (
            select 'pending' as from_state, h.to1 as to_state, h.error ->> 'reason' as reason,
                   h.d1 as digest, h.prev, h.h1 as hash
            union all
            select 'prepared', 'effect_started', null, d2, h.h1,
                   ledger_entry_hash(h.h1, h.id, 'prepared', 'effect_started', at, who,
                                     h.authority_generation, null, d2)
            from (select ledger_row_digest_v2(h.identity_digest, 'effect_started', h.authority_generation,
                                              null, null, null) as d2) d
            where h.state = 'effect_started'
        ) e
        returning 1
    ),
    flying as (
        insert into command_in_flight (authority_id, id)
        select p_authority, m.id from moved m where m.state = 'effect_started'
        returning 1
    ),
    counted as (
        insert into ledger_counts (minute, counter, source, n)
        select date_trunc('minute', at), 'executions', 'engine:' || pg_backend_pid(), count(*)
        from moved m where m.state = 'effect_started'
        having count(*) > 0
        on conflict (minute, counter, source) do update set n = ledger_counts.n + excluded.n
        returning 1
    )
    select m.id, m.state from moved m
    where (select count(*) from entries) >= 0 and (select count(*) from flying) >= 0
      and (select count(*) from counted) >= 0;
end;
$$;
alter function ledger_claim_start(text, text, int) owner to ledger_engine;

-- Record: outcomes of started commands, fenced on the generation.
create or replace function ledger_record(p_authority text, p_generation bigint, p_ids uuid[],
                                         p_states text[], p_results jsonb[], p_errors jsonb[])
returns setof uuid
language plpgsql security definer set search_path = public, pg_temp set enable_seqscan = off as $$
declare
    at timestamptz := now();
    who text := ledger_actor();
begin
    return query
    with moved as (
        update commands c
        set state = o.state, result = o.result, error = o.error, finished_at = at, updated_at = at
        from unnest(p_ids, p_states, p_results, p_errors) as o (id, state, result, error),
             authorities a
        where c.authority_id = p_authority and c.id = o.id and c.state = 'effect_started'
          and c.authority_generation = p_generation and a.id = p_authority and a.generation = p_generation
          and o.state in ('applied', 'failed', 'ambiguous')
        returning c.id, c.state, c.authority_generation, c.result, c.error, c.identity_digest, c.created_at
    ),
    digested as (
        select m.*, p.hash as prev,
               ledger_row_digest_v2(m.identity_digest, m.state, m.authority_generation, m.result, m.error, at) as d
        from moved m
        cross join lateral (select h.hash from command_history h where h.command_id = m.id
                            order by h.command_id desc, h.id desc limit 1) p
        offset 0
    ),
    entries as (
        insert into command_history (authority_id, command_id, from_state, to_state, at, actor,
                                     authority_generation, reason, row_digest, prev_hash, hash)
        select p_authority, d.id, 'effect_started', d.state, at, who, d.authority_generation,
               d.error ->> 'reason', d.d, d.prev,
               ledger_entry_hash(d.prev, d.id, 'effect_started', d.state, at, who, d.authority_generation,
                                 d.error ->> 'reason', d.d)
        from digested d
        returning 1
    ),
    landed as (
        delete from command_in_flight f
        where f.authority_id = p_authority and f.id in (select m.id from moved m)
        returning 1
    ),
    counted as (
        insert into ledger_counts (minute, counter, source, n)
        select date_trunc('minute', at), k.counter, 'engine:' || pg_backend_pid(), count(*)
        from (select m.state as counter from moved m
              union all
              select ledger_latency_bucket(extract(epoch from (at - m.created_at)) * 1000)
              from moved m where m.state = 'applied') k
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
alter function ledger_record(text, bigint, uuid[], text[], jsonb[], jsonb[]) owner to ledger_engine;

-- The driver: the same batches as proto_today, two transactions a batch.
create or replace procedure proto_v3(p_batch int)
language plpgsql as $$
declare
    ids uuid[];
    n int;
begin
    loop
        perform set_config('command_ledger.actor', 'custodian:proto', true);
        select array_agg(s.id) into ids from ledger_claim_start('proto', 'proto-holder', p_batch) s
        where s.state = 'effect_started';
        exit when ids is null;
        commit;
        perform set_config('command_ledger.actor', 'custodian:proto', true);
        n := cardinality(ids);
        perform ledger_record('proto', 1, ids, array_fill('applied'::text, array[n]),
                              (select array_agg(jsonb_build_object('refund_id', 'rf_' || left(i::text, 8)))
                               from unnest(ids) i),
                              array_fill(null::jsonb, array[n]));
        commit;
    end loop;
end;
$$;
