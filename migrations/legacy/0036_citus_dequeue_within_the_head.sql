-- 0036: on Citus too, a claim reads no more of the queue than its head,
-- whatever the shard's statistics.
--
-- Migration 0035 found that a claim which deleted its rows from command_queue
-- with `authority_id = <authority> and id = any(<ids>)` could read the
-- authority's whole backlog: two of the queue's indexes begin with the
-- authority, the primary key (authority_id, id) and the claim order
-- (authority_id, rank, id), and when the statistics counted a handful of rows
-- for the authority (a backlog that grew after the last ANALYZE) PostgreSQL
-- took the claim order with the ids as a filter. 0035 changed the one-node
-- functions. On Citus the claim is the step of 0033,
-- ledger_claim_start_authority, run on the worker holding the authority's
-- shards, whose shard of command_queue has the same two indexes and its own
-- statistics; it deleted with the same statement. 0035's cure, a join on the
-- whole key, does not carry over: Citus routes the statement by the
-- authority, and with the authority a constant PostgreSQL still scanned the
-- authority's rows in claim order and joined them to the ids (5,131 queue
-- index entries read for a claim of 128, docs/runs/citus-dequeue-by-key.txt).
-- Nor does a range of claim ranks: the commands of one insert share their
-- rank. So the delete here is bounded by the head itself: the claim reads
-- the head of the queue in claim order (rank, id), and the rows it takes lie
-- between the head's first and last. The delete names that place
-- (`(rank, id) >= (first) and (rank, id) <= (last)`), which the claim
-- order's index takes as the bounds of its scan; the primary key probed once
-- a row reads no more. Only a scan of the authority's whole range on the
-- primary key would, and the bounds can only make the claim order's scan look
-- cheaper than it. A queued row's rank and id never change. Nothing else in
-- the step changes.
--
-- Off Citus this migration changes nothing (0035 did it there). On a
-- cluster whose steps are already delegated, CREATE OR REPLACE keeps the
-- function's owner, rights and delegation; Citus sends the new body to the
-- workers.

do $migration$
begin
    if not exists (select 1 from pg_extension where extname = 'citus') then
        return;
    end if;
    if not exists (select 1 from pg_roles where rolname = 'ledger_engine')
       or not pg_has_role(current_user, 'ledger_engine', 'member') then
        raise exception 'migration 0036 replaces an engine step and needs the role ledger_engine with the migrating role as its member'
            using errcode = 'CL010',
                  hint = 'Migrate with `command-ledger migrate`, which creates the role and makes the owner its '
                         'member while migrations run; or have an administrator run: create role ledger_engine '
                         'nologin; grant ledger_engine to ' || quote_ident(current_user)
                         || '; then migrate again, then: revoke ledger_engine from ' || quote_ident(current_user);
    end if;

    create or replace function ledger_claim_start_authority(p_authority text, p_holder text, p_limit integer)
    returns setof commands
    language plpgsql security definer
    set search_path to 'public', 'pg_temp'
    set enable_seqscan to 'off'
    as $fn$
    declare
        at timestamptz := now();
        who text := ledger_actor();
        why text := ledger_reason();
        gen bigint;
        queued uuid[] := '{}';
        -- The first and the last of the queue's head in claim order (rank, id).
        first_rank bigint;
        first_id uuid;
        last_rank bigint;
        last_id uuid;
        head record;
        l record;
        -- Per command moved, in id order: what the update writes and the
        -- history says, computed once for both.
        ids uuid[] := '{}';
        identities bytea[] := '{}';
        states text[] := '{}';
        generations bigint[] := '{}';
        errors jsonb[] := '{}';
        finished timestamptz[] := '{}';
        reasons text[] := '{}';
        prev_ids uuid[];
        prevs bytea[];
        expiry text;
        n_started integer := 0;
        -- Up to this many commands, a statement a row (below).
        few constant integer := 4;
        prev bytea;
        hash bytea;
        digest bytea;
        to_state text;
        one uuid;
        one_state text;
        one_generation bigint;
        one_error jsonb;
        one_finished timestamptz;
        one_reason text;
    begin
        -- Citus gives a copy of this function made on a worker added
        -- later EXECUTE for PUBLIC, whatever the coordinator's copy
        -- allows; the coordinator delegates the call without checking.
        -- The worker's session is the caller's own role (the
        -- coordinator connects as it): only a custodian's may go on.
        if not pg_has_role(session_user, 'ledger_custodian', 'member') then
            raise exception 'permission denied: only ledger_custodian runs the engine steps'
                using errcode = '42501';
        end if;
        -- Shared lock: a takeover of the lease waits until this commits.
        select a.generation into gen from authorities a
        where a.id = p_authority and a.lease_holder = p_holder and a.lease_expires_at > at
        for share;
        if gen is null then
            return;
        end if;
        for head in
            select q.id, q.rank from command_queue q
            where q.authority_id = p_authority and (q.ready_at is null or q.ready_at <= at)
            order by q.rank, q.id
            limit p_limit
        loop
            queued := queued || head.id;
            if first_id is null then
                first_rank := head.rank;
                first_id := head.id;
            end if;
            last_rank := head.rank;
            last_id := head.id;
        end loop;
        if cardinality(queued) = 0 then
            return;
        end if;
        -- The rows, locked, skipping any another transaction holds (a cancel).
        for l in
            select c.id, c.deadline_at, c.pinned_generation, c.authority_generation,
                   ledger_identity_digest(c.id, c.scope, c.idempotency_key, c.request_digest,
                                          c.digest_version, c.kind, c.authority_id, c.run_id, c.args,
                                          c.canonical, c.created_at, c.deadline_at, c.pinned_generation,
                                          c.intent_digest, c.canonical_rules, c.intent_epoch) as identity
            from commands c
            where c.authority_id = p_authority and c.id = any(queued) and c.state = 'pending'
            order by c.id
            for update skip locked
        loop
            expiry := case
                          when l.deadline_at <= at then 'deadline_passed'
                          when l.pinned_generation < gen then 'authority_superseded'
                          when l.pinned_generation > gen then 'generation_not_current'
                      end;
            ids := ids || l.id;
            identities := identities || l.identity;
            if expiry is null then
                states := states || 'effect_started'::text;
                generations := generations || gen;
                errors := errors || null::jsonb;
                finished := finished || null::timestamptz;
                n_started := n_started + 1;
            else
                states := states || 'expired'::text;
                generations := generations || l.authority_generation;
                errors := errors || jsonb_build_object('reason', expiry, 'pinned_generation', l.pinned_generation,
                                                       'authority_generation', gen);
                finished := finished || at;
            end if;
            reasons := reasons || coalesce(why, expiry);
        end loop;
        if cardinality(ids) = 0 then
            return;
        end if;
        -- Out of the queue within the head's place in the claim order, so
        -- that no plan reads more than the head (the migration's header says why).
        delete from command_queue q
        where q.authority_id = p_authority
          and (q.rank, q.id) >= (first_rank, first_id) and (q.rank, q.id) <= (last_rank, last_id)
          and q.id = any(ids);
        if cardinality(ids) <= few then
            -- A few commands (a waiting call's one): a statement a row.
            -- Citus runs a single-row statement naming the authority on
            -- its fast path; the set-based statements below take its
            -- insert-select path, whose planning alone costs more than
            -- a few rows' statements (docs/runs/citus-step-statements.txt).
            -- The entries, digests and hashes are the same either way.
            -- Each statement takes plain variables: Citus 13.2 crashes
            -- deparsing an array element (states[i]) in an UPDATE's SET list.
            for i in 1 .. cardinality(ids) loop
                one := ids[i];
                one_state := states[i];
                one_generation := generations[i];
                one_error := errors[i];
                one_finished := finished[i];
                one_reason := reasons[i];
                select h.hash into prev from command_history h
                where h.authority_id = p_authority and h.command_id = one
                order by h.id desc limit 1;
                to_state := case when one_state = 'expired' then 'expired' else 'prepared' end;
                digest := ledger_row_digest_v2(identities[i], to_state, one_generation, null, one_error,
                                               one_finished);
                hash := ledger_entry_hash(prev, one, 'pending', to_state, at, who, one_generation, one_reason,
                                          digest);
                insert into command_history (authority_id, command_id, from_state, to_state, at, actor,
                                             authority_generation, reason, row_digest, prev_hash, hash)
                values (p_authority, one, 'pending', to_state, at, who, one_generation, one_reason, digest,
                        prev, hash);
                if one_state = 'effect_started' then
                    prev := hash;
                    digest := ledger_row_digest_v2(identities[i], 'effect_started', one_generation, null, null,
                                                   null);
                    hash := ledger_entry_hash(prev, one, 'prepared', 'effect_started', at, who, one_generation,
                                              why, digest);
                    insert into command_history (authority_id, command_id, from_state, to_state, at, actor,
                                                 authority_generation, reason, row_digest, prev_hash, hash)
                    values (p_authority, one, 'prepared', 'effect_started', at, who, one_generation, why,
                            digest, prev, hash);
                end if;
                update commands c
                set state = one_state, authority_generation = one_generation, error = one_error,
                    finished_at = one_finished, updated_at = at
                where c.authority_id = p_authority and c.id = one;
                if one_state = 'effect_started' then
                    insert into command_in_flight (authority_id, id) values (p_authority, one);
                end if;
            end loop;
        else
            select array_agg(h.command_id), array_agg(h.hash) into prev_ids, prevs
            from (select distinct on (h.command_id) h.command_id, h.hash from command_history h
                  where h.authority_id = p_authority and h.command_id = any(ids)
                  order by h.command_id, h.id desc) h;
            -- The entries first: the webhook trigger of a terminal row reads its
            -- entry when the update below fires it. Out of pending (to prepared,
            -- or to expired), and for the started ones out of prepared, chained.
            insert into command_history (authority_id, command_id, from_state, to_state, at, actor,
                                         authority_generation, reason, row_digest, prev_hash, hash)
            select p_authority, e.id, e.from_state, e.to_state, at, who, f.generation, e.reason, e.digest, e.prev,
                   e.hash
            from (
                select x.*, p.prev,
                       ledger_entry_hash(p.prev, x.id, 'pending', x.to_state, at, who, x.generation, x.reason,
                                         x.digest) as hash
                from (
                    select v.id, v.identity, v.state, v.generation, v.reason,
                           case when v.state = 'expired' then 'expired' else 'prepared' end as to_state,
                           ledger_row_digest_v2(v.identity,
                                                case when v.state = 'expired' then 'expired' else 'prepared' end,
                                                v.generation, null, v.error, v.finished_at) as digest
                    from unnest(ids, identities, states, generations, errors, finished, reasons)
                         as v (id, identity, state, generation, error, finished_at, reason)
                ) x
                left join unnest(prev_ids, prevs) as p (id, prev) on p.id = x.id
            ) f
            cross join lateral (
                select f.id, 1 as step, 'pending' as from_state, f.to_state, f.reason, f.digest, f.prev, f.hash
                union all
                select f.id, 2, 'prepared', 'effect_started', why, s.digest, f.hash,
                       ledger_entry_hash(f.hash, f.id, 'prepared', 'effect_started', at, who, f.generation, why,
                                         s.digest)
                from (select ledger_row_digest_v2(f.identity, 'effect_started', f.generation, null, null, null)
                             as digest) s
                where f.state = 'effect_started'
            ) e
            order by e.id, e.step;
            update commands c
            set state = v.state, authority_generation = v.generation, error = v.error,
                finished_at = v.finished_at, updated_at = at
            from unnest(ids, states, generations, errors, finished)
                 as v (id, state, generation, error, finished_at)
            where c.authority_id = p_authority and c.id = v.id;
            insert into command_in_flight (authority_id, id)
            select p_authority, v.id from unnest(ids, states) as v (id, state) where v.state = 'effect_started';
        end if;
        if n_started > 0 then
            insert into ledger_counts_by_authority (authority_id, minute, counter, source, n)
            values (p_authority, date_trunc('minute', at), 'executions', 'pg:' || pg_backend_pid(), n_started)
            on conflict (authority_id, minute, counter, source)
            do update set n = ledger_counts_by_authority.n + excluded.n;
        end if;
        return query select c.* from commands c where c.authority_id = p_authority and c.id = any(ids);
    end;
    $fn$;
end
$migration$;
