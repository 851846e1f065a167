-- Storage v3 prototype (issue 54): the machine's columns in a narrow table
-- of their own, measured against today's steps with profile.sh's method.
-- Loaded into a scratch database that setup.sql (engine-v3) filled; never
-- part of a migration. Every step here is today's ledger_claim_start /
-- ledger_record_outcomes with one thing changed, so that the difference
-- is that thing:
--   proto4_claim_start / proto4_record: the state in command_progress
--     (narrow, primary key only), two entries for claim-and-start, the
--     in-flight table kept;
--   proto4_claim_start_one: the same, with one entry for claim-and-start
--     (pending -> effect_started), the in-flight rows kept or not
--     (p_flight; without them recovery would read a partial index on the
--     narrow row, not measured here);
--   proto4_record_any: the record on the narrow row, in-flight rows
--     removed or not (p_flight).
drop function if exists proto4_claim_start_one(text[], text, integer);
create table if not exists command_progress (
    authority_id text not null,
    id uuid not null primary key,
    state text not null default 'pending',
    authority_generation bigint,
    result jsonb,
    error jsonb,
    updated_at timestamptz not null default now(),
    finished_at timestamptz,
    identity_digest bytea
) with (fillfactor = 50);
insert into command_progress (authority_id, id, state, authority_generation, result, error, updated_at, finished_at,
                              identity_digest)
select authority_id, id, state, authority_generation, result, error, updated_at, finished_at, identity_digest
from commands c
where not exists (select 1 from command_progress p where p.id = c.id);

create or replace function proto4_claim_start(p_authorities text[], p_holder text, p_limit integer)
returns setof uuid language plpgsql security definer set search_path = public, pg_temp
set plan_cache_mode = 'force_generic_plan' set enable_seqscan = 'off' set enable_hashjoin = 'off'
set enable_mergejoin = 'off'
as $$
declare
    at timestamptz := now();
    who text := ledger_actor();
    why text := ledger_reason();
begin
    return query
    with lease as materialized (
        select a.id, a.generation from authorities a
        where a.id = any(p_authorities) and a.lease_holder = p_holder and a.lease_expires_at > at
        for share
    ),
    queued as materialized (
        select l.id as authority_id, q.id, l.generation
        from lease l
        cross join lateral (
            select q.id from command_queue q
            where q.authority_id = l.id and (q.ready_at is null or q.ready_at <= at)
            order by q.rank, q.id limit p_limit
        ) q
        limit p_limit
    ),
    pending as materialized (
        select p.authority_id, p.id, qd.generation,
               case
                   when c.deadline_at <= at then 'deadline_passed'
                   when c.pinned_generation < qd.generation then 'authority_superseded'
                   when c.pinned_generation > qd.generation then 'generation_not_current'
               end as expiry, c.pinned_generation,
               coalesce(c.identity_digest,
                        ledger_identity_digest(c.id, c.scope, c.idempotency_key, c.request_digest,
                                               c.digest_version, c.kind, c.authority_id, c.run_id, c.args,
                                               c.canonical, c.created_at, c.deadline_at, c.pinned_generation,
                                               c.intent_digest, c.canonical_rules, c.intent_epoch)) as identity,
               last.hash as prev, last.seq as prev_seq
        from queued qd
        join command_progress p on p.id = qd.id
        join commands c on c.authority_id = qd.authority_id and c.id = qd.id
        left join lateral (select h.hash, h.seq from command_history h where h.command_id = qd.id
                           order by h.command_id desc, h.seq desc limit 1) last on true
        where p.state = 'pending'
        for update of p skip locked
    ),
    dequeued as (
        delete from command_queue q using pending p
        where q.authority_id = p.authority_id and q.id = p.id
        returning 1
    ),
    moved as (
        update command_progress c
        set state = case when v.expiry is null then 'effect_started' else 'expired' end,
            authority_generation = case when v.expiry is null then v.generation else c.authority_generation end,
            error = case when v.expiry is not null then
                        jsonb_build_object('reason', v.expiry, 'pinned_generation', v.pinned_generation,
                                           'authority_generation', v.generation)
                    end,
            finished_at = case when v.expiry is not null then at end,
            identity_digest = v.identity,
            updated_at = at
        from pending v
        where c.id = v.id
        returning c as r, v.prev, v.prev_seq
    ),
    first as materialized (
        select (m.r).authority_id as authority_id, (m.r).id as id, (m.r).state as state,
               (m.r).authority_generation as generation, (m.r).identity_digest as identity, m.prev, m.prev_seq,
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
        select f.authority_id, f.id, f.generation, why as reason, f.hash as prev, f.prev_seq + 1 as prev_seq,
               ledger_row_digest_v2(f.identity, 'effect_started', f.generation, null, null, null) as digest
        from first_hashed f where f.state = 'effect_started'
    ),
    entries as (
        insert into command_history (authority_id, command_id, from_state, to_state, at, actor,
                                     authority_generation, reason, row_digest, prev_hash, hash, seq)
        select e.authority_id, e.id, e.from_state, e.to_state, at, who, e.generation, e.reason,
               e.digest, e.prev, e.hash, e.prev_seq + 1
        from (
            select f.authority_id, f.id, 1 as step, 'pending' as from_state, f.to_state, f.generation,
                   f.reason, f.digest, f.prev, f.hash, f.prev_seq
            from first_hashed f
            union all
            select s.authority_id, s.id, 2, 'prepared', 'effect_started', s.generation, s.reason, s.digest,
                   s.prev,
                   ledger_entry_hash(s.prev, s.id, 'prepared', 'effect_started', at, who, s.generation,
                                     s.reason, s.digest),
                   s.prev_seq
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
        insert into ledger_counts (minute, counter, source, n)
        select date_trunc('minute', at), 'executions', 'pg:' || pg_backend_pid(), count(*)
        from first f where f.state = 'effect_started'
        having count(*) > 0
        on conflict (minute, counter, source) do update set n = ledger_counts.n + excluded.n
        returning 1
    )
    select (m.r).id from moved m
    where (select count(*) from dequeued) >= 0 and (select count(*) from entries) >= 0
      and (select count(*) from flying) >= 0 and (select count(*) from counted) >= 0;
end;
$$;

create or replace function proto4_claim_start_one(p_authorities text[], p_holder text, p_limit integer,
                                                  p_flight boolean)
returns setof uuid language plpgsql security definer set search_path = public, pg_temp
set plan_cache_mode = 'force_generic_plan' set enable_seqscan = 'off' set enable_hashjoin = 'off'
set enable_mergejoin = 'off'
as $$
declare
    at timestamptz := now();
    who text := ledger_actor();
    why text := ledger_reason();
begin
    return query
    with lease as materialized (
        select a.id, a.generation from authorities a
        where a.id = any(p_authorities) and a.lease_holder = p_holder and a.lease_expires_at > at
        for share
    ),
    queued as materialized (
        select l.id as authority_id, q.id, l.generation
        from lease l
        cross join lateral (
            select q.id from command_queue q
            where q.authority_id = l.id and (q.ready_at is null or q.ready_at <= at)
            order by q.rank, q.id limit p_limit
        ) q
        limit p_limit
    ),
    pending as materialized (
        select p.authority_id, p.id, qd.generation,
               case
                   when c.deadline_at <= at then 'deadline_passed'
                   when c.pinned_generation < qd.generation then 'authority_superseded'
                   when c.pinned_generation > qd.generation then 'generation_not_current'
               end as expiry, c.pinned_generation,
               coalesce(c.identity_digest,
                        ledger_identity_digest(c.id, c.scope, c.idempotency_key, c.request_digest,
                                               c.digest_version, c.kind, c.authority_id, c.run_id, c.args,
                                               c.canonical, c.created_at, c.deadline_at, c.pinned_generation,
                                               c.intent_digest, c.canonical_rules, c.intent_epoch)) as identity,
               last.hash as prev, last.seq as prev_seq
        from queued qd
        join command_progress p on p.id = qd.id
        join commands c on c.authority_id = qd.authority_id and c.id = qd.id
        left join lateral (select h.hash, h.seq from command_history h where h.command_id = qd.id
                           order by h.command_id desc, h.seq desc limit 1) last on true
        where p.state = 'pending'
        for update of p skip locked
    ),
    dequeued as (
        delete from command_queue q using pending p
        where q.authority_id = p.authority_id and q.id = p.id
        returning 1
    ),
    moved as (
        update command_progress c
        set state = case when v.expiry is null then 'effect_started' else 'expired' end,
            authority_generation = case when v.expiry is null then v.generation else c.authority_generation end,
            error = case when v.expiry is not null then
                        jsonb_build_object('reason', v.expiry, 'pinned_generation', v.pinned_generation,
                                           'authority_generation', v.generation)
                    end,
            finished_at = case when v.expiry is not null then at end,
            identity_digest = v.identity,
            updated_at = at
        from pending v
        where c.id = v.id
        returning c as r, v.prev, v.prev_seq
    ),
    one as materialized (
        -- One entry out of pending: to effect_started (through prepared), or to expired.
        select (m.r).authority_id as authority_id, (m.r).id as id, (m.r).state as state,
               (m.r).authority_generation as generation, m.prev, m.prev_seq,
               coalesce(why, (m.r).error ->> 'reason') as reason,
               ledger_row_digest_v2((m.r).identity_digest, (m.r).state, (m.r).authority_generation, null,
                                    (m.r).error, (m.r).finished_at) as digest
        from moved m
    ),
    entries as (
        insert into command_history (authority_id, command_id, from_state, to_state, at, actor,
                                     authority_generation, reason, row_digest, prev_hash, hash, seq)
        select o.authority_id, o.id, 'pending', o.state, at, who, o.generation, o.reason, o.digest, o.prev,
               ledger_entry_hash(o.prev, o.id, 'pending', o.state, at, who, o.generation, o.reason, o.digest),
               o.prev_seq + 1
        from one o
        order by o.id
        returning 1
    ),
    flying as (
        insert into command_in_flight (authority_id, id)
        select o.authority_id, o.id from one o where p_flight and o.state = 'effect_started'
        returning 1
    ),
    counted as (
        insert into ledger_counts (minute, counter, source, n)
        select date_trunc('minute', at), 'executions', 'pg:' || pg_backend_pid(), count(*)
        from one o where o.state = 'effect_started'
        having count(*) > 0
        on conflict (minute, counter, source) do update set n = ledger_counts.n + excluded.n
        returning 1
    )
    select (m.r).id from moved m
    where (select count(*) from dequeued) >= 0 and (select count(*) from entries) >= 0
      and (select count(*) from flying) >= 0 and (select count(*) from counted) >= 0;
end;
$$;

create or replace function proto4_record_any(p_authority text, p_generation bigint, p_outcomes jsonb,
                                             p_flight boolean)
returns setof uuid language plpgsql security definer set search_path = public, pg_temp set enable_seqscan = 'off'
as $$
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
        select o.*, last.hash as prev, last.seq as prev_seq
        from outcome o
        join command_progress c on c.id = o.id
        join authorities a on a.id = p_authority and a.generation = p_generation
        left join lateral (select h.hash, h.seq from command_history h where h.command_id = o.id
                           order by h.command_id desc, h.seq desc limit 1) last on true
        where c.authority_id = p_authority and c.state = 'effect_started' and c.authority_generation = p_generation
        for update of c
    ),
    moved as (
        update command_progress c
        set state = f.state,
            result = case when f.state = 'applied' then f.result end,
            error = f.error,
            finished_at = at,
            updated_at = at
        from fenced f
        where c.id = f.id
        returning c.id, c.state, c.authority_generation, c.result, c.error, c.identity_digest, f.prev, f.prev_seq
    ),
    digested as materialized (
        select m.*, coalesce(why, m.error ->> 'reason') as reason,
               ledger_row_digest_v2(m.identity_digest, m.state, m.authority_generation, m.result, m.error, at)
                   as digest,
               i.created_at
        from moved m join commands i on i.authority_id = p_authority and i.id = m.id
    ),
    entries as (
        insert into command_history (authority_id, command_id, from_state, to_state, at, actor,
                                     authority_generation, reason, row_digest, prev_hash, hash, seq)
        select p_authority, d.id, 'effect_started', d.state, at, who, d.authority_generation, d.reason, d.digest,
               d.prev,
               ledger_entry_hash(d.prev, d.id, 'effect_started', d.state, at, who, d.authority_generation,
                                 d.reason, d.digest),
               d.prev_seq + 1
        from digested d
        order by d.id
        returning 1
    ),
    landed as (
        delete from command_in_flight f
        where p_flight and f.authority_id = p_authority and f.id = any (array(select m.id from moved m))
        returning 1
    ),
    counted as (
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
vacuum analyze command_progress;

-- Today's claim, returning ids as the prototype's do (one more SQL call
-- around it, the same for every round).
create or replace function ledger_claim_start_ids(p_authorities text[], p_holder text, p_limit integer)
returns setof uuid language sql
as $$ select s.id from ledger_claim_start(p_authorities, p_holder, p_limit) s $$;

-- As the engine's steps: run as ledger_engine, the role the tables' guards
-- let write the queue, the in-flight rows and the history.
grant select, insert, update, delete on command_progress to ledger_engine;
alter function proto4_claim_start(text[], text, integer) owner to ledger_engine;
alter function proto4_claim_start_one(text[], text, integer, boolean) owner to ledger_engine;
alter function proto4_record_any(text, bigint, jsonb, boolean) owner to ledger_engine;
