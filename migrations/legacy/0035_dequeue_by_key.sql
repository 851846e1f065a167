-- 0035: a command leaves the queue by its key, whatever the queue's
-- statistics.
--
-- The claim (ledger_claim_start) and the trigger path (commands_record_changes)
-- deleted the rows they took out of command_queue with
-- `authority_id = <authority> and id = any(<ids>)`. Two indexes begin with
-- the authority: the primary key (authority_id, id) and the claim order
-- (authority_id, rank, id). When the statistics counted a handful of rows for
-- the authority (a backlog that grew after the last ANALYZE, as batch clients
-- make one), PostgreSQL costed both alike and took the claim order with the
-- ids as a filter: every claim read the authority's whole backlog. In W3 with
-- batch clients the claim of 100 commands read up to 62,000 queue rows
-- (auto_explain, docs/runs/dequeue-by-key.txt), and the custodian drained
-- 640 to 820 commands a second while 6,700 to 8,200 were submitted.
--
-- Both now delete with a join on the whole key, from the rows they moved,
-- and plan no hash or merge join (as they plan no sequential scan): the only
-- plan left probes the primary key once a row. (With hash joins allowed,
-- PostgreSQL read a queue of 5,000 whole rather than probe it 128 times.)
-- The claim also plans once for every authority whatever its caller asks
-- (plan_cache_mode, as the custodian asks of its transactions): planned for a
-- backlog's own statistics, it read the head of the queue by sorting the
-- whole backlog. What the steps change is the same; only how the queue's
-- rows are found.
-- On Citus neither function runs (the engine steps of 0033 and the row-level
-- trigger do), and this migration changes nothing there.

do $migration$
begin
    if exists (select 1 from pg_extension where extname = 'citus') then
        return;
    end if;
    if not exists (select 1 from pg_roles where rolname = 'ledger_engine')
       or not pg_has_role(current_user, 'ledger_engine', 'member') then
        raise exception 'migration 0035 replaces an engine step and needs the role ledger_engine with the migrating role as its member'
            using errcode = 'CL010',
                  hint = 'Migrate with `command-ledger migrate`, which creates the role and makes the owner its '
                         'member while migrations run; or have an administrator run: create role ledger_engine '
                         'nologin; grant ledger_engine to ' || quote_ident(current_user)
                         || '; then migrate again, then: revoke ledger_engine from ' || quote_ident(current_user);
    end if;

create or replace function ledger_claim_start(p_authorities text[], p_holder text, p_limit integer) RETURNS SETOF public.commands
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    SET enable_hashjoin TO 'off'
    SET enable_mergejoin TO 'off'
    AS $fn$
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
$fn$;

create or replace function commands_record_changes() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    SET enable_seqscan TO 'off'
    SET enable_hashjoin TO 'off'
    SET enable_mergejoin TO 'off'
    AS $fn$
declare
    dequeued_authorities text[];
    dequeued_ids uuid[];
    claimed_authorities text[];
    claimed_ids uuid[];
    landed_authorities text[];
    landed_ids uuid[];
    finished_ids uuid[];
    part record;
begin
    with paired as materialized (
        select s.id,
               min(s.authority_id) filter (where not s.old) as authority_id,
               min(s.state) filter (where s.old) as from_state,
               min(s.state) filter (where not s.old) as to_state,
               min(s.authority_generation) filter (where s.old) as from_generation,
               min(s.authority_generation) filter (where not s.old) as to_generation,
               (array_agg(s.r) filter (where not s.old))[1] as r
        from (
            select true as old, o.id, o.authority_id, o.state, o.authority_generation, null::commands as r
            from old_rows o
            union all
            select false, n.id, n.authority_id, n.state, n.authority_generation, n::commands
            from new_rows n
        ) s
        group by s.id
    ),
    entries as (
        insert into command_history (authority_id, command_id, from_state, to_state, at, actor, authority_generation,
                                     reason, row_digest, prev_hash, hash)
        select e.authority_id, e.id, e.from_state, e.to_state, e.at, e.actor, e.authority_generation, e.reason,
               e.row_digest, e.prev_hash,
               ledger_entry_hash(e.prev_hash, e.id, e.from_state, e.to_state, e.at, e.actor,
                                 e.authority_generation, e.reason, e.row_digest)
        from (
            select p.authority_id, p.id, p.from_state, p.to_state, now() as at, ledger_actor() as actor,
                   p.to_generation as authority_generation,
                   coalesce(ledger_reason(),
                            case when p.to_state <> p.from_state then (p.r).error ->> 'reason' end,
                            case when p.to_state = p.from_state then 'adopted by generation ' || p.to_generation end)
                       as reason,
                   ledger_row_digest(p.r) as row_digest,
                   (select h.hash from command_history h where h.command_id = p.id
                    order by h.command_id desc, h.id desc limit 1) as prev_hash
            from paired p
            where p.to_state <> p.from_state or p.to_generation is distinct from p.from_generation
            offset 0 -- evaluated once per row: see the head of this file
        ) e
        order by e.id
    )
    select array_agg(p.authority_id) filter (where p.from_state = 'pending' and p.to_state <> 'pending'),
           array_agg(p.id) filter (where p.from_state = 'pending' and p.to_state <> 'pending'),
           array_agg(p.authority_id) filter (where p.from_state = 'pending'
                                                and p.to_state in ('prepared', 'effect_started')),
           array_agg(p.id) filter (where p.from_state = 'pending' and p.to_state in ('prepared', 'effect_started')),
           array_agg(p.authority_id) filter (where p.from_state in ('prepared', 'effect_started')
                                                and ledger_state_terminal(p.to_state)),
           array_agg(p.id) filter (where p.from_state in ('prepared', 'effect_started')
                                      and ledger_state_terminal(p.to_state)),
           array_agg(p.id) filter (where p.to_state <> p.from_state and ledger_state_terminal(p.to_state))
    into dequeued_authorities, dequeued_ids, claimed_authorities, claimed_ids, landed_authorities, landed_ids,
         finished_ids
    from paired p;

    -- Left pending: out of the queue (a claim, a cancel, an expiry),
    -- each row reached by its key (migration 0035 says why).
    if dequeued_ids is not null then
        delete from command_queue q
        using unnest(dequeued_authorities, dequeued_ids) as u (authority_id, id)
        where q.authority_id = u.authority_id and q.id = u.id;
    end if;

    -- Claimed: in flight until terminal.
    if claimed_ids is not null then
        insert into command_in_flight (authority_id, id)
        select u.authority_id, u.id from unnest(claimed_authorities, claimed_ids) as u (authority_id, id);
    end if;

    for part in
        select u.authority_id, array_agg(u.id) as ids
        from unnest(landed_authorities, landed_ids) as u (authority_id, id)
        group by u.authority_id
    loop
        delete from command_in_flight f where f.authority_id = part.authority_id and f.id = any(part.ids);
    end loop;

    perform pg_notify('command_ledger_outcome', u.id::text) from unnest(finished_ids) as u (id);
    return null;
end;
$fn$;
end
$migration$;
