CREATE OR REPLACE FUNCTION public.ledger_claim_start_authority(p_authority text, p_holder text, p_limit integer, p_rooms jsonb DEFAULT NULL::jsonb)
 RETURNS SETOF commands
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
 SET enable_seqscan TO 'off'
 SET enable_bitmapscan TO 'off'
AS $function$
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
        prev_seqs integer[];
        expiry text;
        n_started integer := 0;
        -- Up to this many commands, a statement a row (below).
        few constant integer := 4;
        prev bytea;
        prev_seq integer;
        hash bytea;
        digest bytea;
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
        if p_rooms is null then
            for head in
                -- No p_rooms: the commands under no limit, in the partial
                -- index of those (0048).
                select q.id, q.rank from command_queue q
                where q.authority_id = p_authority and q.provider is null and (q.ready_at is null or q.ready_at <= at)
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
        else
            -- p_rooms ({"<group>": room}, read under the groups' locks on
            -- the coordinator in this transaction, 0049): the heads of those
            -- groups' commands, each up to its room, in claim order.
            queued := array(
                select g.id
                from jsonb_each_text(p_rooms) as r (provider, room)
                cross join lateral (
                    select q.id, q.rank from command_queue q
                    where q.authority_id = p_authority and q.provider = r.provider
                      and (q.ready_at is null or q.ready_at <= at)
                    order by q.rank, q.id
                    limit greatest(r.room::integer, 0)
                ) g
                order by g.rank, g.id
                limit p_limit);
        end if;
        if cardinality(queued) = 0 then
            return;
        end if;
        -- The rows, locked, skipping any another transaction holds (a cancel).
        for l in
            select c.id, c.deadline_at, c.pinned_generation, c.authority_generation,
                   -- Stored at submit since 0050; hashed here when it is not.
                   coalesce(c.identity_digest,
                            ledger_identity_digest(c.id, c.scope, c.idempotency_key, c.request_digest,
                                                   c.digest_version, c.kind, c.authority_id, c.run_id, c.args,
                                                   c.canonical, c.created_at, c.deadline_at, c.pinned_generation,
                                                   c.intent_digest, c.canonical_rules, c.intent_epoch)) as identity
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
        -- that no plan reads more than the head (the migration's header says why);
        -- in the claim order's index of the commands under no limit (0048).
        if p_rooms is null then
            delete from command_queue q
            where q.authority_id = p_authority and q.provider is null
              and (q.rank, q.id) >= (first_rank, first_id) and (q.rank, q.id) <= (last_rank, last_id)
              and q.id = any(ids);
        else
            -- In the claim order's index of the groups' commands (0048).
            delete from command_queue q
            where q.authority_id = p_authority
              and q.provider in (select jsonb_object_keys(p_rooms))
              and q.id = any(ids);
        end if;
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
                select h.hash, h.seq into prev, prev_seq from command_history h
                where h.authority_id = p_authority and h.command_id = one
                order by h.seq desc limit 1;
                -- One entry: to expired, or to effect_started through
                -- prepared (one instant, one entry naming both, 0045).
                digest := ledger_row_digest_v2(identities[i], one_state, one_generation, null, one_error,
                                               one_finished);
                if one_state = 'effect_started' then
                    hash := ledger_entry_hash_v2(prev, one, 'pending', 'prepared', one_state, at, who,
                                                 one_generation, one_reason, digest);
                    insert into command_history (authority_id, command_id, from_state, through, to_state, at,
                                                 actor, authority_generation, reason, row_digest, prev_hash, hash,
                                                 seq)
                    values (p_authority, one, 'pending', 'prepared', one_state, at, who, one_generation,
                            one_reason, digest, prev, hash, prev_seq + 1);
                else
                    hash := ledger_entry_hash(prev, one, 'pending', one_state, at, who, one_generation, one_reason,
                                              digest);
                    insert into command_history (authority_id, command_id, from_state, to_state, at, actor,
                                                 authority_generation, reason, row_digest, prev_hash, hash, seq)
                    values (p_authority, one, 'pending', one_state, at, who, one_generation, one_reason, digest,
                            prev, hash, prev_seq + 1);
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
            select array_agg(h.command_id), array_agg(h.hash), array_agg(h.seq) into prev_ids, prevs, prev_seqs
            from (select distinct on (h.command_id) h.command_id, h.hash, h.seq from command_history h
                  where h.authority_id = p_authority and h.command_id = any(ids)
                  order by h.command_id, h.seq desc) h;
            -- The entries first: the webhook trigger of a terminal row reads its
            -- entry when the update below fires it. One out of pending each: to
            -- expired, or to effect_started through prepared (one instant, one
            -- entry naming both, 0045), chained.
            insert into command_history (authority_id, command_id, from_state, through, to_state, at, actor,
                                         authority_generation, reason, row_digest, prev_hash, hash, seq)
            select p_authority, x.id, 'pending', x.through, x.state, at, who, x.generation, x.reason, x.digest,
                   p.prev,
                   case when x.through is null
                        then ledger_entry_hash(p.prev, x.id, 'pending', x.state, at, who, x.generation, x.reason,
                                               x.digest)
                        else ledger_entry_hash_v2(p.prev, x.id, 'pending', x.through, x.state, at, who,
                                                  x.generation, x.reason, x.digest)
                   end,
                   p.prev_seq + 1
            from (
                select v.id, v.state, v.generation, v.reason,
                       case when v.state = 'effect_started' then 'prepared' end as through,
                       ledger_row_digest_v2(v.identity, v.state, v.generation, null, v.error, v.finished_at)
                           as digest
                from unnest(ids, identities, states, generations, errors, finished, reasons)
                     as v (id, identity, state, generation, error, finished_at, reason)
            ) x
            left join unnest(prev_ids, prevs, prev_seqs) as p (id, prev, prev_seq) on p.id = x.id
            order by x.id;
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
    $function$
;

alter function ledger_claim_start_authority(p_authority text, p_holder text, p_limit integer, p_rooms jsonb) owner to ledger_engine;

comment on function ledger_claim_start_authority(p_authority text, p_holder text, p_limit integer, p_rooms jsonb) is
    'Engine step (0033): ledger_claim_start for the one authority p_authority. On Citus it runs on the worker holding the authority''s shards (delegated by ledger_delegate_engine_steps()), in single-table statements; on one node it is ledger_claim_start(array[p_authority], ...). With p_rooms ({"<group>": room}, 0049: read on the coordinator by ledger_provider_rooms in the same transaction) it claims only those provider groups'' commands, each group up to its room; without, only the commands under no limit.';

revoke all on function ledger_claim_start_authority(p_authority text, p_holder text, p_limit integer, p_rooms jsonb) from public;
grant execute on function ledger_claim_start_authority(p_authority text, p_holder text, p_limit integer, p_rooms jsonb) to ledger_custodian;
