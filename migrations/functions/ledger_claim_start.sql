CREATE OR REPLACE FUNCTION public.ledger_claim_start(p_authorities text[], p_holder text, p_limit integer)
 RETURNS SETOF commands
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
 SET enable_bitmapscan TO 'off'
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
AS $function$
declare
    at timestamptz := now();
    who text := ledger_actor();
    why text := ledger_reason();
    -- The provider groups (0048) whose commands wait at these authorities'
    -- queues: their names, how many of their commands this claim may start,
    -- and their buckets' tokens as refilled at refill_at.
    v_names text[] := '{}';
    v_rooms integer[] := '{}';
    v_tokens double precision[] := '{}';
    refill_at timestamptz;
begin
    -- Locked in name order: claims of one group, by any custodian, take
    -- turns at its bucket. No group, no lock: kinds under no limit pay one
    -- probe of an empty table.
    select coalesce(array_agg(l.name), '{}') into v_names
    from (select p.name from provider_limits p
          where exists (select 1 from command_queue q
                        where q.authority_id = any(p_authorities) and q.provider = p.name
                          and (q.ready_at is null or q.ready_at <= at))
          order by p.name
          for update of p) l;
    if cardinality(v_names) > 0 then
        -- A statement of its own, so that its snapshot holds what the
        -- claims this one waited for committed: their commands in flight.
        refill_at := clock_timestamp();
        select coalesce(array_agg(r.name order by r.name), '{}'), coalesce(array_agg(r.room order by r.name), '{}'),
               coalesce(array_agg(r.tokens order by r.name), '{}')
        into v_names, v_rooms, v_tokens
        from (
            select p.name, t.tokens,
                   greatest(0, least(p_limit,
                       coalesce(floor(t.tokens)::integer, p_limit),
                       coalesce(p.max_in_flight - ledger_provider_in_flight(p.name)::integer, p_limit))) as room
            from provider_limits p
            cross join lateral (select ledger_provider_tokens(p.tokens, p.rate, p.burst, p.refilled_at, refill_at) as tokens) t
            where p.name = any(v_names)
        ) r;
    end if;

    return query
    with lease as materialized (
        -- Shared lock: a takeover of the lease waits until this commits.
        select a.id, a.generation from authorities a
        where a.id = any(p_authorities) and a.lease_holder = p_holder and a.lease_expires_at > at
        for share
    ),
    queued as materialized (
        -- Per leased authority, its first claimable commands: those under no
        -- provider limit, and of each group as many as it has room for
        -- across these authorities, lowest rank first. A group with no room
        -- is not read: its commands stay queued in their place. The lease
        -- admits one claimer per authority; the command rows are locked
        -- below, skipping any another transaction holds (a cancel).
        select h.authority_id, h.id, h.generation, h.provider
        from (
            select l.id as authority_id, l.generation, q.id, q.rank, null::text as provider
            from lease l
            cross join lateral (
                select q.id, q.rank from command_queue q
                where q.authority_id = l.id and q.provider is null and (q.ready_at is null or q.ready_at <= at)
                order by q.rank, q.id
                limit p_limit
            ) q
            union all
            select g.authority_id, g.generation, g.id, g.rank, g.provider
            from (
                select l.id as authority_id, l.generation, q.id, q.rank, r.name as provider, r.room,
                       row_number() over (partition by r.name order by q.rank, q.id) as nth
                from unnest(v_names, v_rooms) r(name, room)
                cross join lease l
                cross join lateral (
                    select q.id, q.rank from command_queue q
                    where q.authority_id = l.id and q.provider = r.name
                      and (q.ready_at is null or q.ready_at <= at)
                    order by q.rank, q.id
                    limit r.room
                ) q
                where r.room > 0
            ) g
            where g.nth <= g.room
        ) h
        order by h.rank, h.id
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
               last.hash as prev, last.seq as prev_seq, qd.provider
        from queued qd
        join commands c on c.authority_id = qd.authority_id and c.id = qd.id
        left join lateral (select h.hash, h.seq from command_history h where h.command_id = c.id
                           order by h.command_id desc, h.seq desc limit 1) last on true
        where c.state = 'pending'
        for update of c skip locked
    ),
    dequeued as (
        -- Each row reached by its key, whatever the queue's
        -- statistics (migration 0035 says why).
        delete from command_queue q
        using pending p
        where q.authority_id = p.authority_id and q.id = p.id
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
        returning c as r, v.prev, v.prev_seq, v.provider
    ),
    one as materialized (
        -- One entry out of pending: to effect_started through prepared
        -- (both transitions in this transaction, at one instant: one entry
        -- names both, 0045), or to expired.
        select (m.r).authority_id as authority_id, (m.r).id as id, (m.r).state as state,
               (m.r).authority_generation as generation, m.prev, m.prev_seq, m.provider,
               case when (m.r).state = 'effect_started' then 'prepared' end as through,
               coalesce(why, (m.r).error ->> 'reason') as reason,
               ledger_row_digest_v2((m.r).identity_digest, (m.r).state, (m.r).authority_generation, null,
                                    (m.r).error, (m.r).finished_at) as digest
        from moved m
    ),
    entries as (
        insert into command_history (authority_id, command_id, from_state, through, to_state, at, actor,
                                     authority_generation, reason, row_digest, prev_hash, hash, seq)
        select o.authority_id, o.id, 'pending', o.through, o.state, at, who, o.generation, o.reason, o.digest,
               o.prev,
               case when o.through is null
                    then ledger_entry_hash(o.prev, o.id, 'pending', o.state, at, who, o.generation, o.reason,
                                           o.digest)
                    else ledger_entry_hash_v2(o.prev, o.id, 'pending', o.through, o.state, at, who, o.generation,
                                              o.reason, o.digest)
               end,
               o.prev_seq + 1
        from one o
        order by o.id
        returning 1
    ),
    flying as (
        insert into command_in_flight (authority_id, id)
        select o.authority_id, o.id from one o where o.state = 'effect_started'
        returning 1
    ),
    counted as (
        -- What the history's counting trigger adds for other writers.
        insert into ledger_counts (minute, counter, source, n)
        select date_trunc('minute', at), 'executions', 'pg:' || pg_backend_pid(), count(*)
        from one o
        where o.state = 'effect_started'
        having count(*) > 0
        on conflict (minute, counter, source) do update set n = ledger_counts.n + excluded.n
        returning 1
    ),
    spent as (
        -- Each command started takes a token of its group's bucket.
        update provider_limits p
        set tokens = b.tokens - coalesce(n.started, 0), refilled_at = refill_at
        from unnest(v_names, v_tokens) b(name, tokens)
        left join (select o.provider, count(*) as started from one o
                   where o.state = 'effect_started' and o.provider is not null
                   group by o.provider) n on n.provider = b.name
        where p.name = b.name and p.rate is not null
        returning 1
    ),
    finished as (
        select pg_notify('command_ledger_outcome', o.id::text) from one o where o.state = 'expired'
    )
    select (m.r).* from moved m
    where (select count(*) from dequeued) >= 0 and (select count(*) from entries) >= 0
      and (select count(*) from flying) >= 0 and (select count(*) from counted) >= 0
      and (select count(*) from spent) >= 0 and (select count(*) from finished) >= 0;
end;
$function$
;

alter function ledger_claim_start(p_authorities text[], p_holder text, p_limit integer) owner to ledger_engine;

comment on function ledger_claim_start(p_authorities text[], p_holder text, p_limit integer) is
    'Engine step (0030): up to p_limit queued commands of the authorities p_holder leases, lowest claim rank first, moved pending -> prepared -> effect_started under the lease''s generation (one history entry naming both transitions, 0045), or pending -> expired (deadline passed, pinned generation not the lease''s), with the queue and in-flight tables kept. Returns the rows as they now are. Fenced by the lease row held for share; no effect starts before it commits. A provider group''s commands (0048) are taken only as far as its limits allow (in flight across every custodian, and its token bucket), under a lock of its provider_limits row; the others stay queued in their place.';

revoke all on function ledger_claim_start(p_authorities text[], p_holder text, p_limit integer) from public;
grant execute on function ledger_claim_start(p_authorities text[], p_holder text, p_limit integer) to ledger_custodian;
