-- 0033: the engine steps on Citus.
--
-- On one node the custodian's steps have been functions since 0030 (0032 in
-- the baseline): ledger_claim_start and ledger_record_outcomes, SECURITY
-- DEFINER, owned by ledger_engine, with the triggers they replace skipping
-- what runs as that role. On Citus the custodian kept the trigger path: each
-- row's transition fired a row-level trigger on its shard, whose statements
-- on the distributed tables Citus planned again, row by row (W3b on a 3-node
-- cluster: 0.05x one node, docs/runs/w3b-one-node-vs-citus-0032.txt).
--
-- Here the steps come to Citus in the form Citus runs fast: each takes one
-- authority (p_authority, the distribution column's value), and the
-- coordinator hands the whole call to the worker holding that authority's
-- shards (create_distributed_function(..., 'p_authority', force_delegation),
-- by ledger_delegate_engine_steps() below, which `command-ledger migrate`
-- calls after ledger_distribute()). There each statement names one table and
-- one authority (Citus's fast path, run locally): the lease held for share,
-- the queue's rows, the commands' rows locked and updated, their history
-- entries chained in one insert, the in-flight rows and the counters
-- (ledger_counts_by_authority). No NOTIFY on a shard (whoever commits wakes
-- the waiters on Citus, as before).
--
--   ledger_claim_start_authority(p_authority, p_holder, p_limit)
--       one node: ledger_claim_start over that one authority;
--       Citus: the step above, for one authority.
--   ledger_record_outcomes(p_authority, p_generation, p_outcomes)
--       one node: unchanged (0032); Citus: created here (0032 dropped it).
--
-- On Citus the triggers the engine replaces skip ledger_engine as they do on
-- one node. The statement triggers of command_queue and command_in_flight
-- are split: Citus copies a statement trigger that names TRUNCATE to the
-- shards when a table is distributed but never propagates a later change to
-- it, so the refusal of inserts, updates and deletes (which the shards run)
-- is a trigger of its own, and TRUNCATE (which the coordinator refuses) one
-- of its own. ledger_engine must exist on every node with the migrating
-- role its member while migrations run: `command-ledger migrate` sees to it.

do $migration$
declare
    citus boolean := exists (select 1 from pg_extension where extname = 'citus');
begin
    if not exists (select 1 from pg_roles where rolname = 'ledger_engine')
       or not pg_has_role(current_user, 'ledger_engine', 'member') then
        raise exception 'the engine steps (0033) need the role ledger_engine and the migrating role as its member'
            using errcode = 'CL010',
                  hint = 'Migrate with `command-ledger migrate`, which creates the role and makes the owner its '
                         'member while migrations run; or have an administrator run: create role ledger_engine '
                         'nologin; grant ledger_engine to ' || quote_ident(current_user)
                         || '; then migrate again, then: revoke ledger_engine from ' || quote_ident(current_user);
    end if;

    if not citus then
        create function ledger_claim_start_authority(p_authority text, p_holder text, p_limit integer)
        returns setof commands
        language sql security definer
        set search_path to 'public', 'pg_temp'
        as $fn$
            select * from ledger_claim_start(array[p_authority], p_holder, p_limit)
        $fn$;
    else
        create function ledger_claim_start_authority(p_authority text, p_holder text, p_limit integer)
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
            queued uuid[];
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
            queued := array(select q.id from command_queue q
                            where q.authority_id = p_authority and (q.ready_at is null or q.ready_at <= at)
                            order by q.rank, q.id
                            limit p_limit);
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
            delete from command_queue q where q.authority_id = p_authority and q.id = any(ids);
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

        create function ledger_record_outcomes(p_authority text, p_generation bigint, p_outcomes jsonb)
        returns setof uuid
        language plpgsql security definer
        set search_path to 'public', 'pg_temp'
        set enable_seqscan to 'off'
        as $fn$
        declare
            at timestamptz := now();
            who text := ledger_actor();
            why text := ledger_reason();
            wanted uuid[];
            l record;
            k record;
            ids uuid[] := '{}';
            identities bytea[] := '{}';
            created timestamptz[] := '{}';
            prev_ids uuid[];
            prevs bytea[];
            -- Up to this many commands, a statement a row (below).
            few constant integer := 4;
            st text;
            res jsonb;
            err jsonb;
            reason text;
            prev bytea;
            digest bytea;
            one uuid;
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
            perform 1 from authorities a where a.id = p_authority and a.generation = p_generation;
            if not found then
                return;
            end if;
            wanted := array(select o.id from jsonb_to_recordset(p_outcomes) as o (id uuid, state text)
                            where o.state in ('applied', 'failed', 'ambiguous'));
            for l in
                select c.id, c.created_at,
                       ledger_identity_digest(c.id, c.scope, c.idempotency_key, c.request_digest,
                                              c.digest_version, c.kind, c.authority_id, c.run_id, c.args,
                                              c.canonical, c.created_at, c.deadline_at, c.pinned_generation,
                                              c.intent_digest, c.canonical_rules, c.intent_epoch) as identity
                from commands c
                where c.authority_id = p_authority and c.id = any(wanted) and c.state = 'effect_started'
                  and c.authority_generation = p_generation
                order by c.id
                for update
            loop
                ids := ids || l.id;
                identities := identities || l.identity;
                created := created || l.created_at;
            end loop;
            if cardinality(ids) = 0 then
                return;
            end if;
            if cardinality(ids) <= few then
                -- A few commands: a statement a row, as in the claim above.
                for i in 1 .. cardinality(ids) loop
                    one := ids[i];
                    select o.state, o.result, o.error into st, res, err
                    from jsonb_to_recordset(p_outcomes) as o (id uuid, state text, result jsonb, error jsonb)
                    where o.id = one
                    limit 1;
                    select h.hash into prev from command_history h
                    where h.authority_id = p_authority and h.command_id = one
                    order by h.id desc limit 1;
                    res := case when st = 'applied' then res end;
                    reason := coalesce(why, err ->> 'reason');
                    digest := ledger_row_digest_v2(identities[i], st, p_generation, res, err, at);
                    insert into command_history (authority_id, command_id, from_state, to_state, at, actor,
                                                 authority_generation, reason, row_digest, prev_hash, hash)
                    values (p_authority, one, 'effect_started', st, at, who, p_generation, reason, digest, prev,
                            ledger_entry_hash(prev, one, 'effect_started', st, at, who, p_generation, reason,
                                              digest));
                    update commands c
                    set state = st, result = res, error = err, finished_at = at, updated_at = at
                    where c.authority_id = p_authority and c.id = one;
                    delete from command_in_flight f where f.authority_id = p_authority and f.id = one;
                end loop;
            else
                select array_agg(h.command_id), array_agg(h.hash) into prev_ids, prevs
                from (select distinct on (h.command_id) h.command_id, h.hash from command_history h
                      where h.authority_id = p_authority and h.command_id = any(ids)
                      order by h.command_id, h.id desc) h;
                -- The entries first: the webhook trigger reads each terminal entry
                -- when the update below fires it.
                insert into command_history (authority_id, command_id, from_state, to_state, at, actor,
                                             authority_generation, reason, row_digest, prev_hash, hash)
                select p_authority, d.id, 'effect_started', d.state, at, who, p_generation, d.reason, d.digest, d.prev,
                       ledger_entry_hash(d.prev, d.id, 'effect_started', d.state, at, who, p_generation, d.reason,
                                         d.digest)
                from (
                    select x.id, o.state, coalesce(why, o.error ->> 'reason') as reason, p.prev,
                           ledger_row_digest_v2(x.identity, o.state, p_generation,
                                                case when o.state = 'applied' then o.result end, o.error, at) as digest
                    from unnest(ids, identities) as x (id, identity)
                    join jsonb_to_recordset(p_outcomes) as o (id uuid, state text, result jsonb, error jsonb)
                      on o.id = x.id
                    left join unnest(prev_ids, prevs) as p (id, prev) on p.id = x.id
                ) d
                order by d.id;
                update commands c
                set state = o.state,
                    result = case when o.state = 'applied' then o.result end,
                    error = o.error,
                    finished_at = at,
                    updated_at = at
                from jsonb_to_recordset(p_outcomes) as o (id uuid, state text, result jsonb, error jsonb)
                where c.authority_id = p_authority and c.id = o.id and c.id = any(ids);
                delete from command_in_flight f where f.authority_id = p_authority and f.id = any(ids);
            end if;
            -- Each outcome, and each applied command's latency bucket: one
            -- single-row upsert a counter. Citus runs a single-row insert on
            -- its fast path; an INSERT ... SELECT takes its insert-select
            -- path, about ten times the time for the few counters of a batch
            -- (docs/runs/citus-step-statements.txt).
            for k in
                select c.counter, count(*) as n
                from (
                    select o.state as counter
                    from unnest(ids) as x (id)
                    join jsonb_to_recordset(p_outcomes) as o (id uuid, state text) on o.id = x.id
                    union all
                    select ledger_latency_bucket(extract(epoch from (at - x.created_at)) * 1000)
                    from unnest(ids, created) as x (id, created_at)
                    join jsonb_to_recordset(p_outcomes) as o (id uuid, state text) on o.id = x.id
                    where o.state = 'applied'
                ) c
                group by c.counter
                order by c.counter
            loop
                insert into ledger_counts_by_authority (authority_id, minute, counter, source, n)
                values (p_authority, date_trunc('minute', at), k.counter, 'pg:' || pg_backend_pid(), k.n)
                on conflict (authority_id, minute, counter, source)
                do update set n = ledger_counts_by_authority.n + excluded.n;
            end loop;
            return query select unnest(ids);
        end;
        $fn$;

        -- The engine's rights on Citus: what it reads and writes there.
        grant select, update on commands to ledger_engine;
        grant select, insert on command_history to ledger_engine;
        grant select, delete on command_queue to ledger_engine;
        grant select, insert, delete on command_in_flight to ledger_engine;
        -- Locking a row (the lease, for share) needs an UPDATE right on a column.
        grant select, update (lease_holder) on authorities to ledger_engine;
        grant usage on sequence command_history_id_seq to ledger_engine;
        grant select, insert, update on ledger_counts_by_authority to ledger_engine;
        create policy commands_engine on commands for all to ledger_engine using (true) with check (true);

        -- Every trigger that does the engine's work for other writers skips it.
        set local citus.enable_unsafe_triggers = on;
        drop trigger commands_guard on commands;
        create trigger commands_guard before insert or delete or update on commands
            for each row when (current_user <> 'ledger_engine') execute function commands_guard();
        if exists (select 1 from pg_dist_partition where logicalrelid = 'commands'::regclass) then
            drop trigger commands_record_changes on commands;
            create trigger commands_record_changes after update on commands for each row
                when (current_user <> 'ledger_engine'
                      and (new.state is distinct from old.state
                           or new.authority_generation is distinct from old.authority_generation))
                execute function commands_record_change_row();
            -- The shards keep the statement triggers they were given when the
            -- tables were distributed: drop them there (the shards are the owner's).
            perform run_command_on_workers($cmd$
                do $do$
                declare t record;
                begin
                    for t in select tgname, tgrelid::regclass as rel from pg_trigger
                             where tgname ~ '^command_(queue|in_flight)_follows_commands_[0-9]+$'
                    loop
                        execute format('drop trigger %I on %s', t.tgname, t.rel);
                    end loop;
                end
                $do$
            $cmd$);
        end if;
        -- Distributed later: the row triggers ledger_distribute() creates.
        update ledger_distribution
        set rekey = array(
            select replace(k.r,
                           'when (new.state is distinct from old.state or new.authority_generation is distinct from old.authority_generation)',
                           'when (current_user <> ''ledger_engine'' and (new.state is distinct from old.state or new.authority_generation is distinct from old.authority_generation))')
            from unnest(rekey) with ordinality as k (r, n)
            order by k.n)
        where table_name = 'commands';
        drop trigger command_queue_follows_commands on command_queue;
        create trigger command_queue_follows_commands before insert or delete or update on command_queue
            for each statement when (current_user <> 'ledger_engine') execute function refuse_direct_work_change();
        create trigger command_queue_kept before truncate on command_queue
            for each statement execute function refuse_direct_work_change();
        drop trigger command_in_flight_follows_commands on command_in_flight;
        create trigger command_in_flight_follows_commands before insert or delete or update on command_in_flight
            for each statement when (current_user <> 'ledger_engine') execute function refuse_direct_work_change();
        create trigger command_in_flight_kept before truncate on command_in_flight
            for each statement execute function refuse_direct_work_change();

        alter function ledger_record_outcomes(text, bigint, jsonb) owner to ledger_engine;
        revoke all on function ledger_record_outcomes(text, bigint, jsonb) from public;
        grant execute on function ledger_record_outcomes(text, bigint, jsonb) to ledger_custodian;
        comment on function ledger_record_outcomes(text, bigint, jsonb) is
            'Engine step (0033, Citus): records the outcomes (a JSON array of {id, state, result, error}; state '
            'applied, failed or ambiguous) of p_authority''s effect_started commands, only while the authority is at '
            'p_generation, with one history entry each, the in-flight rows removed and the outcomes counted in '
            'ledger_counts_by_authority. Returns the ids recorded. Runs on the worker holding the authority''s '
            'shards (ledger_delegate_engine_steps()); whoever commits wakes the waiters. Run it in a SERIALIZABLE '
            'transaction.';
    end if;

    alter function ledger_claim_start_authority(text, text, integer) owner to ledger_engine;
    revoke all on function ledger_claim_start_authority(text, text, integer) from public;
    grant execute on function ledger_claim_start_authority(text, text, integer) to ledger_custodian;
end
$migration$;

comment on function ledger_claim_start_authority(text, text, integer) is
    'Engine step (0033): ledger_claim_start for the one authority p_authority. On Citus it runs on the worker '
    'holding the authority''s shards (delegated by ledger_delegate_engine_steps()), in single-table statements; '
    'on one node it is ledger_claim_start(array[p_authority], ...).';

create function ledger_delegate_engine_steps() returns integer
language plpgsql security definer
set search_path to 'public', 'pg_temp'
as $$
declare
    f regprocedure;
    done integer := 0;
begin
    if not exists (select 1 from pg_extension where extname = 'citus') then
        raise exception 'ledger_delegate_engine_steps() needs a Citus coordinator'
            using errcode = 'CL013';
    end if;
    for f in
        select p.oid::regprocedure from pg_proc p
        where p.pronamespace = 'public'::regnamespace
          and p.proname in ('ledger_claim_start_authority', 'ledger_record_outcomes')
    loop
        if not exists (select 1 from pg_dist_object o
                       where o.classid = 'pg_proc'::regclass and o.objid = f
                         and o.distribution_argument_index is not null) then
            perform create_distributed_function(f, 'p_authority', colocate_with := 'commands',
                                                force_delegation := true);
            -- A function Citus creates on a worker may be executed by PUBLIC
            -- there, whatever the coordinator's copy allows: said again now,
            -- the revoke reaches every node.
            execute format('revoke all on function %s from public', f);
            execute format('grant execute on function %s to ledger_custodian', f);
            done := done + 1;
        end if;
    end loop;
    return done;
end;
$$;

comment on function ledger_delegate_engine_steps() is
    'On a Citus coordinator, after ledger_distribute(): the engine steps (ledger_claim_start_authority, '
    'ledger_record_outcomes) are run by the worker holding p_authority''s shards, the whole call in one round '
    'trip, also inside a transaction block (force_delegation), executable by ledger_custodian only on every node. '
    'Returns how many it delegated. Idempotent.';

revoke all on function ledger_delegate_engine_steps() from public;
