-- 0037: a command's history entries in the order of their chain, on every
-- layout. Each entry carries its place in its command's chain (seq: 1 for
-- the creation, the previous entry's plus one after), and every writer finds
-- the entry it chains to by it, not by id.
--
-- Until now the previous entry was the command's entry of the highest id.
-- On one node ids come from one sequence, and a command's transitions are
-- written one after another under its row's lock, so the highest id was the
-- last entry. On Citus each node draws ids from a range of its own (its
-- group number in the high bits), and a shard group moved onto a node of a
-- lower group goes on with that node's lower ids: the command's next entry
-- sorted before its earlier ones, the transition after it chained to the
-- wrong entry (the chain forked) and `verify` reported breaks that no one
-- made (docs/runs/citus-history-order-after-move.txt). A place in the chain
-- moves with the row. The unique index (command_id, seq, authority_id) also
-- makes a fork impossible: two entries chained to the same one would take
-- the same place.
--
-- Existing entries are numbered in id order, which is their chain's order
-- wherever no shard has moved onto a lower group. A command whose entries in
-- id order do not chain (its shards moved so, or its history was tampered
-- with) is numbered by walking its chain from its creation, each entry's
-- successor being the one that names its hash (the lowest id if two do);
-- entries the walk does not reach follow in id order, and `verify` names
-- them as before. The history is append-only: its triggers are off while
-- the column is filled.
--
-- The functions that write a command's next entry or read its last one are
-- re-created with the lookup by seq and the inserts giving it; nothing else
-- in them changes. On Citus the engine steps keep their owner, rights and
-- delegation (CREATE OR REPLACE), and Citus sends the new bodies to the
-- workers.

do $migration$
begin
    if not exists (select 1 from pg_roles where rolname = 'ledger_engine')
       or not pg_has_role(current_user, 'ledger_engine', 'member') then
        raise exception 'migration 0037 replaces the engine steps and needs the role ledger_engine with the migrating role as its member'
            using errcode = 'CL010',
                  hint = 'Migrate with `command-ledger migrate`, which creates the role and makes the owner its '
                         'member while migrations run; or have an administrator run: create role ledger_engine '
                         'nologin; grant ledger_engine to ' || quote_ident(current_user)
                         || '; then migrate again, then: revoke ledger_engine from ' || quote_ident(current_user);
    end if;
    -- On Citus, one connection a node for every statement below: the
    -- functions re-created at the end are distributed objects, which Citus
    -- will not change after a statement that used several connections to a
    -- node in the same transaction.
    if exists (select 1 from pg_extension where extname = 'citus') then
        set local citus.multi_shard_modify_mode = 'sequential';
    end if;
end
$migration$;

alter table command_history add column seq integer;

do $migration$
declare
    cmd record;
    entry record;
    walked bigint[];
    tip bytea;
    n integer;
begin
    -- Citus changes the triggers of a distributed table's shards only so:
    -- with this setting, and all the user's triggers at once (one named
    -- statement trigger stays as it was on the shards).
    if exists (select 1 from pg_extension where extname = 'citus') then
        set local citus.enable_unsafe_triggers = on;
    end if;
    alter table command_history disable trigger user;
    update command_history h
    set seq = o.n
    from (select e.authority_id, e.id,
                 row_number() over (partition by e.authority_id, e.command_id order by e.id) as n
          from command_history e) o
    where h.authority_id = o.authority_id and h.id = o.id;
    for cmd in
        select distinct x.authority_id, x.command_id
        from (select e.authority_id, e.command_id, e.prev_hash,
                     lag(e.hash) over (partition by e.authority_id, e.command_id order by e.id) as before
              from command_history e) x
        where x.prev_hash is distinct from x.before
    loop
        walked := '{}';
        tip := null;
        n := 0;
        loop
            select h.id, h.hash into entry from command_history h
            where h.authority_id = cmd.authority_id and h.command_id = cmd.command_id
              and h.prev_hash is not distinct from tip and h.id <> all(walked)
            order by h.id limit 1;
            exit when not found;
            n := n + 1;
            walked := walked || entry.id;
            tip := entry.hash;
            update command_history h set seq = n where h.authority_id = cmd.authority_id and h.id = entry.id;
        end loop;
        for entry in
            select h.id from command_history h
            where h.authority_id = cmd.authority_id and h.command_id = cmd.command_id and h.id <> all(walked)
            order by h.id
        loop
            n := n + 1;
            update command_history h set seq = n where h.authority_id = cmd.authority_id and h.id = entry.id;
        end loop;
    end loop;
    alter table command_history enable trigger user;
    alter table command_history alter column seq set not null;
    -- Inside the block: Citus sends an index's statement on to the shards
    -- by its text, which must be the one statement.
    create unique index command_history_chain_order on command_history (command_id, seq, authority_id);
    drop index command_history_command_idx;
end
$migration$;

comment on column command_history.seq is
    'The entry''s place in its command''s chain: 1 for the creation, the previous entry''s plus one after. '
    'Entries are read in this order, never by id: on Citus each node draws ids from a range of its own, and a '
    'shard moved onto another node goes on with that node''s (0037).';
comment on index command_history_chain_order is
    'A command''s entries in chain order, read backwards for the last one; one entry a place, so a chain '
    'cannot fork (0037). authority_id is in it because a unique index on Citus holds the distribution column.';

CREATE OR REPLACE FUNCTION public.commands_record_change_row()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
declare
    entry_at timestamptz := now();
    entry_actor text := ledger_actor();
    entry_reason text := coalesce(ledger_reason(),
                                  case when new.state <> old.state then new.error ->> 'reason' end,
                                  case when new.state = old.state
                                       then 'adopted by generation ' || new.authority_generation end);
    entry_digest bytea := ledger_row_digest(row(new.*)::commands);
    prev bytea;
    prev_seq integer;
    counted text[];
    count_minute timestamptz;
    count_source text;
begin
    select h.hash, h.seq into prev, prev_seq from command_history h
    where h.authority_id = new.authority_id and h.command_id = new.id
    order by h.command_id desc, h.seq desc limit 1;
    insert into command_history (authority_id, command_id, from_state, to_state, at, actor, authority_generation,
                                 reason, row_digest, prev_hash, hash, seq)
    values (new.authority_id, new.id, old.state, new.state, entry_at, entry_actor, new.authority_generation,
            entry_reason, entry_digest, prev,
            ledger_entry_hash(prev, new.id, old.state, new.state, entry_at, entry_actor, new.authority_generation,
                              entry_reason, entry_digest),
            coalesce(prev_seq, 0) + 1);
    if old.state = 'pending' and new.state <> 'pending' then
        delete from command_queue q where q.authority_id = old.authority_id and q.id = old.id;
    end if;
    if old.state = 'pending' and new.state in ('prepared', 'effect_started') then
        insert into command_in_flight (authority_id, id) values (new.authority_id, new.id);
    end if;
    if old.state in ('prepared', 'effect_started') and ledger_state_terminal(new.state) then
        delete from command_in_flight f where f.authority_id = old.authority_id and f.id = old.id;
    end if;
    -- The counts ledger_count_history() makes on one node, for this entry.
    -- Every value is computed first: the statement then names constants only.
    if new.state <> old.state and new.state in ('effect_started', 'applied', 'failed', 'ambiguous') then
        counted := array[case when new.state = 'effect_started' then 'executions' else new.state end];
        if new.state = 'applied' then
            counted := counted || ledger_latency_bucket(extract(epoch from (entry_at - new.created_at)) * 1000);
        end if;
        count_minute := date_trunc('minute', entry_at);
        count_source := 'pg:' || pg_backend_pid();
        insert into ledger_counts_by_authority (authority_id, minute, counter, source, n)
        select new.authority_id, count_minute, c.counter, count_source, 1
        from unnest(counted) as c (counter)
        on conflict (authority_id, minute, counter, source)
        do update set n = ledger_counts_by_authority.n + excluded.n;
    end if;
    -- No NOTIFY here: on a shard it would be sent on the worker, where no
    -- waiter listens, and a transaction that wrote to two nodes cannot
    -- commit after one ("cannot PREPARE a transaction that has executed
    -- LISTEN, UNLISTEN, or NOTIFY"). On Citus, waiters and custodians poll.
    return null;
end;
$function$;

CREATE OR REPLACE FUNCTION public.commands_record_insert_row()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
declare
    entry_at timestamptz := now();
    entry_actor text := coalesce((select a.actor from ledger_actors() a where a.command_id = new.id), ledger_actor());
    entry_reason text := ledger_reason();
    entry_digest bytea := ledger_row_digest(row(new.*)::commands);
begin
    insert into command_history (authority_id, command_id, from_state, to_state, at, actor, authority_generation,
                                 reason, row_digest, prev_hash, hash, seq)
    values (new.authority_id, new.id, null, new.state, entry_at, entry_actor, new.authority_generation,
            entry_reason, entry_digest, null,
            ledger_entry_hash(null, new.id, null, new.state, entry_at, entry_actor, new.authority_generation,
                              entry_reason, entry_digest),
            1);
    insert into command_queue (authority_id, id, rank, ready_at)
    values (new.authority_id, new.id, ledger_claim_rank(new.created_at, new.not_before, new.priority), new.not_before);
    return null;
end;
$function$;

CREATE OR REPLACE FUNCTION public.commands_record_inserts()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
begin
    insert into command_history (authority_id, command_id, from_state, to_state, at, actor, authority_generation, reason,
                                 row_digest, prev_hash, hash, seq)
    select e.authority_id, e.id, null, e.state, e.at, e.actor, e.authority_generation, e.reason, e.row_digest, null,
           ledger_entry_hash(null, e.id, null, e.state, e.at, e.actor, e.authority_generation, e.reason,
                             e.row_digest),
           1
    from (
        select n.authority_id, n.id, n.state, now() as at, coalesce(a.actor, ledger_actor()) as actor,
               n.authority_generation, ledger_reason() as reason,
               ledger_row_digest(n::commands) as row_digest
        from new_rows n
        left join ledger_actors() a on a.command_id = n.id
        offset 0 -- evaluated once per row: see the head of 0025
    ) e
    order by e.id;

    insert into command_queue (authority_id, id, rank, ready_at)
    select n.authority_id, n.id, ledger_claim_rank(n.created_at, n.not_before, n.priority), n.not_before
    from new_rows n;
    return null;
end;
$function$;

CREATE OR REPLACE FUNCTION public.command_resolutions_admit()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
declare
    current_state text;
begin
    select c.state into current_state from commands c
    where c.authority_id = new.authority_id and c.id = new.command_id
    for share;
    if current_state is null then
        raise exception 'no command % of authority %', new.command_id, new.authority_id using errcode = 'CL012';
    end if;
    if current_state <> 'ambiguous' then
        raise exception 'command % is %, not ambiguous: only an ambiguous command is resolved', new.command_id,
            current_state using errcode = 'CL012';
    end if;
    new.at := now();
    -- By (command_id, seq), the index that reads this command's entries only (0037).
    new.anchor_hash := (select h.hash from command_history h
                        where h.authority_id = new.authority_id and h.command_id = new.command_id
                        order by h.command_id desc, h.seq desc limit 1);
    new.hash := ledger_resolution_hash(new.anchor_hash, new.command_id, new.outcome, new.evidence,
                                       new.reference, new.source, new.actor, new.at);
    return new;
end;
$function$;

CREATE OR REPLACE FUNCTION public.commands_webhook_events()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
declare
    endpoint record;
    entry_hash bytea;
    body jsonb;
    event_id uuid;
begin
    -- Live endpoints of the command's scope: for a scope without any, this
    -- one probe of webhook_endpoints_by_scope is all the trigger costs.
    for endpoint in
        select e.id from webhook_endpoints e
        where e.scope = new.scope and e.disabled_at is null
          and (e.kinds is null or new.kind = any (e.kinds))
          and (e.states is null or new.state = any (e.states))
        order by e.id
    loop
        if body is null then
            -- The terminal entry, written by the history trigger before this
            -- one runs (see the head of migration 0029). A terminal state has
            -- no way out, so there is exactly one entry into it.
            select h.hash into entry_hash from command_history h
            where h.authority_id = new.authority_id and h.command_id = new.id and h.to_state = new.state
            order by h.command_id desc, h.seq desc
            limit 1;
            body := jsonb_build_object(
                'command_id', new.id,
                'key', new.idempotency_key,
                'kind', new.kind,
                'authority', new.authority_id,
                'state', new.state,
                'result', new.result,
                'error', new.error,
                'finished_at', new.finished_at,
                'history_hash', encode(entry_hash, 'hex'));
        end if;
        -- Computed first: on a Citus shard the insert then names constants only.
        event_id := ledger_uuid_v7();
        insert into webhook_events (id, authority_id, endpoint_id, command_id, payload)
        values (event_id, new.authority_id, endpoint.id, new.id, body);
    end loop;
    return null;
end;
$function$;

CREATE OR REPLACE FUNCTION public.prune_authority(p_authority text, older_than interval, max_rows integer)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
declare
    ids uuid[];
    scopes uuid[];
    keys text[];
begin
    select array_agg(v.id) into ids
    from (
        select c.id
        from commands c
        where c.authority_id = p_authority
          and c.finished_at < now() - older_than
          and not exists (select 1 from holds h
                          where h.authority_id = p_authority and (h.resembles = c.id or h.command_id = c.id))
        order by c.id
        limit max_rows
        for update of c skip locked
    ) v;
    if ids is null then
        return 0;
    end if;
    insert into pruned_commands (id, scope, idempotency_key, kind, authority_id, state,
                                 created_at, finished_at, pruned_by, record)
    select c.id, c.scope, c.idempotency_key, c.kind, c.authority_id, c.state,
           c.created_at, c.finished_at, ledger_actor(),
           jsonb_build_object(
               'command', to_jsonb(c),
               'history', coalesce((select jsonb_agg(to_jsonb(h) order by h.seq)
                                    from command_history h
                                    where h.authority_id = p_authority and h.command_id = c.id), '[]'::jsonb),
               'coalesced', coalesce((select jsonb_agg(to_jsonb(r) order by r.answered_at)
                                      from coalesced_requests r
                                      where r.authority_id = p_authority and r.command_id = c.id), '[]'::jsonb))
    from commands c
    where c.authority_id = p_authority and c.id = any(ids);
    select array_agg(c.scope), array_agg(c.idempotency_key) into scopes, keys
    from commands c
    where c.authority_id = p_authority and c.id = any(ids);
    delete from command_keys k
    where (k.scope, k.idempotency_key) in (select * from unnest(scopes, keys))
      and k.command_id = any(ids);
    delete from commands c where c.authority_id = p_authority and c.id = any(ids);
    return cardinality(ids);
end;
$function$;

-- The layouts' own functions: on Citus the steps of 0033 and 0036 (and the
-- statement trigger's copy it keeps unused); on one node the steps of 0030
-- and 0035 and the statement trigger of 0035.
do $migration$
begin
    if exists (select 1 from pg_extension where extname = 'citus') then
CREATE OR REPLACE FUNCTION public.commands_record_changes()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
 SET enable_seqscan TO 'off'
AS $function$
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
                                     reason, row_digest, prev_hash, hash, seq)
        select e.authority_id, e.id, e.from_state, e.to_state, e.at, e.actor, e.authority_generation, e.reason,
               e.row_digest, e.prev_hash,
               ledger_entry_hash(e.prev_hash, e.id, e.from_state, e.to_state, e.at, e.actor,
                                 e.authority_generation, e.reason, e.row_digest),
               coalesce(e.prev_seq, 0) + 1
        from (
            select p.authority_id, p.id, p.from_state, p.to_state, now() as at, ledger_actor() as actor,
                   p.to_generation as authority_generation,
                   coalesce(ledger_reason(),
                            case when p.to_state <> p.from_state then (p.r).error ->> 'reason' end,
                            case when p.to_state = p.from_state then 'adopted by generation ' || p.to_generation end)
                       as reason,
                   ledger_row_digest(p.r) as row_digest,
                   last.hash as prev_hash, last.seq as prev_seq
            from paired p
            left join lateral (select h.hash, h.seq from command_history h where h.command_id = p.id
                               order by h.command_id desc, h.seq desc limit 1) last on true
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

    -- Left pending: out of the queue (a claim, a cancel, an expiry).
    for part in
        select u.authority_id, array_agg(u.id) as ids
        from unnest(dequeued_authorities, dequeued_ids) as u (authority_id, id)
        group by u.authority_id
    loop
        delete from command_queue q where q.authority_id = part.authority_id and q.id = any(part.ids);
    end loop;

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
$function$;

CREATE OR REPLACE FUNCTION public.ledger_claim_start_authority(p_authority text, p_holder text, p_limit integer)
 RETURNS SETOF commands
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
 SET enable_seqscan TO 'off'
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
                select h.hash, h.seq into prev, prev_seq from command_history h
                where h.authority_id = p_authority and h.command_id = one
                order by h.seq desc limit 1;
                to_state := case when one_state = 'expired' then 'expired' else 'prepared' end;
                digest := ledger_row_digest_v2(identities[i], to_state, one_generation, null, one_error,
                                               one_finished);
                hash := ledger_entry_hash(prev, one, 'pending', to_state, at, who, one_generation, one_reason,
                                          digest);
                insert into command_history (authority_id, command_id, from_state, to_state, at, actor,
                                             authority_generation, reason, row_digest, prev_hash, hash, seq)
                values (p_authority, one, 'pending', to_state, at, who, one_generation, one_reason, digest,
                        prev, hash, prev_seq + 1);
                if one_state = 'effect_started' then
                    prev := hash;
                    digest := ledger_row_digest_v2(identities[i], 'effect_started', one_generation, null, null,
                                                   null);
                    hash := ledger_entry_hash(prev, one, 'prepared', 'effect_started', at, who, one_generation,
                                              why, digest);
                    insert into command_history (authority_id, command_id, from_state, to_state, at, actor,
                                                 authority_generation, reason, row_digest, prev_hash, hash, seq)
                    values (p_authority, one, 'prepared', 'effect_started', at, who, one_generation, why,
                            digest, prev, hash, prev_seq + 2);
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
            -- entry when the update below fires it. Out of pending (to prepared,
            -- or to expired), and for the started ones out of prepared, chained.
            insert into command_history (authority_id, command_id, from_state, to_state, at, actor,
                                         authority_generation, reason, row_digest, prev_hash, hash, seq)
            select p_authority, e.id, e.from_state, e.to_state, at, who, f.generation, e.reason, e.digest, e.prev,
                   e.hash, f.prev_seq + e.step
            from (
                select x.*, p.prev, p.prev_seq,
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
                left join unnest(prev_ids, prevs, prev_seqs) as p (id, prev, prev_seq) on p.id = x.id
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
    $function$;

CREATE OR REPLACE FUNCTION public.ledger_record_outcomes(p_authority text, p_generation bigint, p_outcomes jsonb)
 RETURNS SETOF uuid
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
 SET enable_seqscan TO 'off'
AS $function$
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
            prev_seqs integer[];
            -- Up to this many commands, a statement a row (below).
            few constant integer := 4;
            st text;
            res jsonb;
            err jsonb;
            reason text;
            prev bytea;
            prev_seq integer;
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
                    select h.hash, h.seq into prev, prev_seq from command_history h
                    where h.authority_id = p_authority and h.command_id = one
                    order by h.seq desc limit 1;
                    res := case when st = 'applied' then res end;
                    reason := coalesce(why, err ->> 'reason');
                    digest := ledger_row_digest_v2(identities[i], st, p_generation, res, err, at);
                    insert into command_history (authority_id, command_id, from_state, to_state, at, actor,
                                                 authority_generation, reason, row_digest, prev_hash, hash, seq)
                    values (p_authority, one, 'effect_started', st, at, who, p_generation, reason, digest, prev,
                            ledger_entry_hash(prev, one, 'effect_started', st, at, who, p_generation, reason,
                                              digest),
                            prev_seq + 1);
                    update commands c
                    set state = st, result = res, error = err, finished_at = at, updated_at = at
                    where c.authority_id = p_authority and c.id = one;
                    delete from command_in_flight f where f.authority_id = p_authority and f.id = one;
                end loop;
            else
                select array_agg(h.command_id), array_agg(h.hash), array_agg(h.seq) into prev_ids, prevs, prev_seqs
                from (select distinct on (h.command_id) h.command_id, h.hash, h.seq from command_history h
                      where h.authority_id = p_authority and h.command_id = any(ids)
                      order by h.command_id, h.seq desc) h;
                -- The entries first: the webhook trigger reads each terminal entry
                -- when the update below fires it.
                insert into command_history (authority_id, command_id, from_state, to_state, at, actor,
                                             authority_generation, reason, row_digest, prev_hash, hash, seq)
                select p_authority, d.id, 'effect_started', d.state, at, who, p_generation, d.reason, d.digest, d.prev,
                       ledger_entry_hash(d.prev, d.id, 'effect_started', d.state, at, who, p_generation, d.reason,
                                         d.digest),
                       d.prev_seq + 1
                from (
                    select x.id, o.state, coalesce(why, o.error ->> 'reason') as reason, p.prev, p.prev_seq,
                           ledger_row_digest_v2(x.identity, o.state, p_generation,
                                                case when o.state = 'applied' then o.result end, o.error, at) as digest
                    from unnest(ids, identities) as x (id, identity)
                    join jsonb_to_recordset(p_outcomes) as o (id uuid, state text, result jsonb, error jsonb)
                      on o.id = x.id
                    left join unnest(prev_ids, prevs, prev_seqs) as p (id, prev, prev_seq) on p.id = x.id
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
        $function$;
    else
CREATE OR REPLACE FUNCTION public.commands_record_changes()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
 SET enable_seqscan TO 'off'
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
AS $function$
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
                                     reason, row_digest, prev_hash, hash, seq)
        select e.authority_id, e.id, e.from_state, e.to_state, e.at, e.actor, e.authority_generation, e.reason,
               e.row_digest, e.prev_hash,
               ledger_entry_hash(e.prev_hash, e.id, e.from_state, e.to_state, e.at, e.actor,
                                 e.authority_generation, e.reason, e.row_digest),
               coalesce(e.prev_seq, 0) + 1
        from (
            select p.authority_id, p.id, p.from_state, p.to_state, now() as at, ledger_actor() as actor,
                   p.to_generation as authority_generation,
                   coalesce(ledger_reason(),
                            case when p.to_state <> p.from_state then (p.r).error ->> 'reason' end,
                            case when p.to_state = p.from_state then 'adopted by generation ' || p.to_generation end)
                       as reason,
                   ledger_row_digest(p.r) as row_digest,
                   last.hash as prev_hash, last.seq as prev_seq
            from paired p
            left join lateral (select h.hash, h.seq from command_history h where h.command_id = p.id
                               order by h.command_id desc, h.seq desc limit 1) last on true
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
$function$;

CREATE OR REPLACE FUNCTION public.ledger_claim_start(p_authorities text[], p_holder text, p_limit integer)
 RETURNS SETOF commands
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
AS $function$
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
               last.hash as prev, last.seq as prev_seq
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
        returning c as r, v.prev, v.prev_seq
    ),
    first as materialized (
        -- The entry out of pending: to prepared, or to expired.
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
        -- The entry out of prepared, for the started ones.
        select f.authority_id, f.id, f.generation, why as reason, f.hash as prev, f.prev_seq + 1 as prev_seq,
               ledger_row_digest_v2(f.identity, 'effect_started', f.generation, null, null, null) as digest
        from first_hashed f
        where f.state = 'effect_started'
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
$function$;

CREATE OR REPLACE FUNCTION public.ledger_record_outcomes(p_authority text, p_generation bigint, p_outcomes jsonb)
 RETURNS SETOF uuid
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
 SET enable_seqscan TO 'off'
AS $function$
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
               last.hash as prev, last.seq as prev_seq
        from outcome o
        join commands c on c.authority_id = p_authority and c.id = o.id
        join authorities a on a.id = p_authority and a.generation = p_generation
        left join lateral (select h.hash, h.seq from command_history h where h.command_id = o.id
                           order by h.command_id desc, h.seq desc limit 1) last on true
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
        returning c.id, c.state, c.authority_generation, c.result, c.error, c.identity_digest, c.created_at, f.prev, f.prev_seq
    ),
    digested as materialized (
        select m.*, coalesce(why, m.error ->> 'reason') as reason,
               ledger_row_digest_v2(m.identity_digest, m.state, m.authority_generation, m.result, m.error, at)
                   as digest
        from moved m
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
$function$;
    end if;
end
$migration$;
