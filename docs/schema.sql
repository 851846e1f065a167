-- The ledger's schema after the migrations in migrations/, as
-- `pg_dump --schema-only --no-owner` prints it, normalised: the version
-- lines, session SETs and \restrict lines are left out.
--
-- Generated; do not edit. `cargo test` (tests/it/schema_file.rs) fails when
-- this file differs from what the migrations make; rewrite it with
--   COMMAND_LEDGER_WRITE_SCHEMA=1 cargo test --test it schema_file
-- pg_dump major version: 15

--
-- PostgreSQL database dump
--

--
-- Name: authorities_guard(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.authorities_guard() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
begin
    if new.generation < old.generation then
        raise exception 'authority % generation cannot decrease (% -> %)', old.id, old.generation, new.generation
            using errcode = 'CL005';
    end if;
    new.updated_at := now();
    return new;
end;
$$;

--
-- Name: coalesced_requests_delete_guard(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.coalesced_requests_delete_guard() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
begin
    if exists (select 1 from commands where authority_id = old.authority_id and id = old.command_id) then
        raise exception 'coalesced_requests is append-only'
            using errcode = 'CL003';
    end if;
    return old;
end;
$$;

--
-- Name: command_history_delete_guard(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.command_history_delete_guard() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
begin
    if exists (select 1 from commands where authority_id = old.authority_id and id = old.command_id) then
        raise exception 'command_history is append-only'
            using errcode = 'CL003';
    end if;
    return old;
end;
$$;

--
-- Name: command_keys_refuse_change(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.command_keys_refuse_change() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
begin
    if tg_op = 'TRUNCATE' then
        raise exception 'command_keys is kept: it cannot be truncated'
            using errcode = 'CL003';
    end if;
    raise exception 'command_keys rows are never changed (key %)', old.idempotency_key
        using errcode = 'CL003';
end;
$$;

--
-- Name: FUNCTION command_keys_refuse_change(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.command_keys_refuse_change() IS 'Refuses update and truncate on command_keys: a key names its command for good (prune_commands() deletes it with the command).';

--
-- Name: command_resolutions_admit(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.command_resolutions_admit() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
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
$$;

--
-- Name: FUNCTION command_resolutions_admit(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.command_resolutions_admit() IS 'Before insert on command_resolutions: refuses (CL012) a command that is not ambiguous; sets at, anchor_hash and hash.';

--
-- Name: commands_guard(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.commands_guard() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $_$
begin
    if tg_op = 'INSERT' then
        if new.state <> 'pending' then
            raise exception 'a command is created pending, not %', new.state
                using errcode = 'CL001';
        end if;
        -- The immutable columns' rules, checked once (0034): the update branch
        -- below refuses any change to these columns.
        if not coalesce(new.authority_id ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$', true) then
            raise exception 'new row for relation "commands" violates check constraint "commands_authority_format"'
                using errcode = 'check_violation', constraint = 'commands_authority_format', table = 'commands';
        end if;
        if not coalesce(new.kind ~ '^[a-z][a-z0-9_.-]{0,63}$', true) then
            raise exception 'new row for relation "commands" violates check constraint "commands_kind_format"'
                using errcode = 'check_violation', constraint = 'commands_kind_format', table = 'commands';
        end if;
        if not coalesce(octet_length(new.idempotency_key) between 1 and 255, true) then
            raise exception 'new row for relation "commands" violates check constraint "commands_key_length"'
                using errcode = 'check_violation', constraint = 'commands_key_length', table = 'commands';
        end if;
        if not coalesce(octet_length(new.request_digest) = 32, true) then
            raise exception 'new row for relation "commands" violates check constraint "commands_digest_is_sha256"'
                using errcode = 'check_violation', constraint = 'commands_digest_is_sha256', table = 'commands';
        end if;
        if not coalesce(new.intent_digest is null or octet_length(new.intent_digest) = 32, true) then
            raise exception 'new row for relation "commands" violates check constraint "commands_intent_digest_is_sha256"'
                using errcode = 'check_violation', constraint = 'commands_intent_digest_is_sha256', table = 'commands';
        end if;
        if not coalesce(new.intent_epoch > 0, true) then
            raise exception 'new row for relation "commands" violates check constraint "commands_intent_epoch_positive"'
                using errcode = 'check_violation', constraint = 'commands_intent_epoch_positive', table = 'commands';
        end if;
        if not coalesce(new.pinned_generation >= 0, true) then
            raise exception 'new row for relation "commands" violates check constraint "commands_pinned_generation_non_negative"'
                using errcode = 'check_violation', constraint = 'commands_pinned_generation_non_negative', table = 'commands';
        end if;
        if not coalesce(new.priority between -100 and 100, true) then
            raise exception 'new row for relation "commands" violates check constraint "commands_priority_in_range"'
                using errcode = 'check_violation', constraint = 'commands_priority_in_range', table = 'commands';
        end if;
        if not coalesce(new.trace_parent ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$', true) then
            raise exception 'new row for relation "commands" violates check constraint "commands_trace_parent_format"'
                using errcode = 'check_violation', constraint = 'commands_trace_parent_format', table = 'commands';
        end if;
        if new.trace_state is not null and (new.trace_parent is null or char_length(new.trace_state) > 512) then
            raise exception 'new row for relation "commands" violates check constraint "commands_trace_state_length"'
                using errcode = 'check_violation', constraint = 'commands_trace_state_length', table = 'commands';
        end if;
        if new.attempt <> 1 then
            raise exception 'attempt % of a chain is written only by the engine''s record step', new.attempt
                using errcode = 'CL003';
        end if;
        new.updated_at := new.created_at;
        return new;
    end if;

    if tg_op = 'DELETE' then
        if not ledger_state_terminal(old.state) then
            raise exception 'command % is % and cannot be deleted before it is terminal', old.id, old.state
                using errcode = 'CL002';
        end if;
        return old;
    end if;

    -- UPDATE
    if ledger_state_terminal(old.state) then
        raise exception 'command % is % (terminal) and cannot change', old.id, old.state
            using errcode = 'CL002';
    end if;
    if new.id <> old.id or new.scope <> old.scope or new.idempotency_key <> old.idempotency_key
       or new.request_digest <> old.request_digest or new.digest_version <> old.digest_version
       or new.kind <> old.kind or new.authority_id <> old.authority_id
       or new.run_id is distinct from old.run_id or new.args <> old.args
       or new.canonical <> old.canonical or new.created_at <> old.created_at
       or new.trace_parent is distinct from old.trace_parent
       or new.trace_state is distinct from old.trace_state then
        raise exception 'command % identity columns are immutable', old.id
            using errcode = 'CL003';
    end if;
    if new.not_before is distinct from old.not_before or new.priority <> old.priority then
        raise exception 'command % not_before and priority are immutable', old.id
            using errcode = 'CL003';
    end if;
    if new.intent_digest is distinct from old.intent_digest
       or new.canonical_rules is distinct from old.canonical_rules
       or new.intent_epoch is distinct from old.intent_epoch
       or new.attempt <> old.attempt then
        raise exception 'command % intent columns are immutable', old.id
            using errcode = 'CL003';
    end if;
    if new.pinned_generation is distinct from old.pinned_generation then
        raise exception 'command % pinned generation is immutable', old.id
            using errcode = 'CL003';
    end if;
    -- The generation is bound when the command is prepared. Afterwards it may
    -- only move forward, and only while no effect was attempted (a prepared row
    -- adopted by a newer generation of its authority).
    if old.authority_generation is not null
       and new.authority_generation is distinct from old.authority_generation then
        if new.authority_generation is null or new.authority_generation < old.authority_generation
           or old.state <> 'prepared' or new.state <> 'prepared' then
            raise exception 'command % generation % cannot change to % (% -> %)', old.id,
                old.authority_generation, new.authority_generation, old.state, new.state
                using errcode = 'CL003';
        end if;
    end if;
    if new.state <> old.state then
        if not ledger_transition_allowed(old.state, new.state) then
            raise exception 'illegal transition % -> % for command %', old.state, new.state, old.id
                using errcode = 'CL001';
        end if;
        if ledger_state_terminal(new.state) then
            new.finished_at := coalesce(new.finished_at, now());
        end if;
    end if;
    new.updated_at := now();
    return new;
end;
$_$;

--
-- Name: FUNCTION commands_guard(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.commands_guard() IS 'Before each row change of commands: on insert, a command created pending and its immutable columns'' rules (0034: formats, lengths, ranges; SQLSTATE 23514 under the former CHECK constraints'' names); on update, the state machine and the immutability of the identity columns (the trace context and the attempt among them); only the engine writes an attempt after the first; on delete, only terminal commands.';

--
-- Name: commands_guard_delete(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.commands_guard_delete() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
begin
    if not exists (select 1 from pruned_commands where authority_id = old.authority_id and id = old.id) then
        raise exception 'command % is deleted only by prune_commands(), which archives it first', old.id
            using errcode = 'CL002';
    end if;
    return old;
end;
$$;

--
-- Name: commands_history_leaves(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.commands_history_leaves() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
begin
    delete from command_history h
    using old_rows o
    where h.authority_id = o.authority_id and h.command_id = o.id;
    return null;
end;
$$;

--
-- Name: FUNCTION commands_history_leaves(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.commands_history_leaves() IS 'After a delete of commands (prune_commands(), which archives each with its history first): their history entries go too (one node; the foreign key''s cascade did this before 0030).';

--
-- Name: commands_identity_digest_immutable(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.commands_identity_digest_immutable() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
begin
    raise exception 'command % identity digest is written by the engine only', old.id
        using errcode = 'CL003';
end;
$$;

--
-- Name: FUNCTION commands_identity_digest_immutable(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.commands_identity_digest_immutable() IS 'Refuses any change to commands.identity_digest by a statement that does not run as ledger_engine (CL003).';

--
-- Name: commands_queue_follows_deadline(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.commands_queue_follows_deadline() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
begin
    update command_queue q set deadline_at = new.deadline_at
    where q.authority_id = new.authority_id and q.id = new.id;
    return null;
end;
$$;

--
-- Name: FUNCTION commands_queue_follows_deadline(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.commands_queue_follows_deadline() IS 'After a pending command''s deadline_at changed: gives its queue row the new one (0038).';

--
-- Name: commands_record_change_row(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.commands_record_change_row() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
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
$$;

--
-- Name: FUNCTION commands_record_change_row(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.commands_record_change_row() IS 'Row-level form of commands_record_changes() (used on Citus, fired when the state or generation changes): one chained history entry, command_queue and command_in_flight follow the state, and the entry is counted in ledger_counts_by_authority as ledger_count_history() counts it on one node. No NOTIFY (it would be sent on the worker, and would stop a two-node transaction from committing): on Citus, waiters poll.';

--
-- Name: commands_record_changes(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.commands_record_changes() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    SET enable_seqscan TO 'off'
    SET enable_hashjoin TO 'off'
    SET enable_mergejoin TO 'off'
    AS $$
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
$$;

--
-- Name: FUNCTION commands_record_changes(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.commands_record_changes() IS 'After each update statement on commands (one node): a chained history entry for every row whose state or authority generation changed, the rows that left pending out of command_queue, the claimed ones into command_in_flight until terminal, and a NOTIFY command_ledger_outcome for each that became terminal. Old and new rows are paired by grouping, never by a join of the transition tables, and the two small tables are changed by key: linear in the rows changed, whatever the statistics (0023). Each entry''s row digest and previous hash are computed once (0025).';

--
-- Name: commands_record_insert_row(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.commands_record_insert_row() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
declare
    entry_at timestamptz := now();
    entry_actor text := coalesce((select a.actor from ledger_actors() a where a.command_id = new.id), ledger_actor());
    entry_reason text := ledger_reason();
    entry_digest bytea := ledger_row_digest(row(new.*)::commands);
    entry_provider text;
begin
    insert into command_history (authority_id, command_id, from_state, to_state, at, actor, authority_generation,
                                 reason, row_digest, prev_hash, hash, seq)
    values (new.authority_id, new.id, null, new.state, entry_at, entry_actor, new.authority_generation,
            entry_reason, entry_digest, null,
            ledger_entry_hash(null, new.id, null, new.state, entry_at, entry_actor, new.authority_generation,
                              entry_reason, entry_digest),
            1);
    -- The queue row takes its kind's provider group at this authority
    -- (0049: on the authority's own shard on Citus), read first: Citus
    -- takes no subquery in an INSERT's values.
    select k.provider into entry_provider from authority_provider_kinds k
    where k.authority_id = new.authority_id and k.kind = new.kind;
    insert into command_queue (authority_id, id, rank, ready_at, deadline_at, provider)
    values (new.authority_id, new.id, ledger_claim_rank(new.created_at, new.not_before, new.priority), new.not_before,
            new.deadline_at, entry_provider);
    return null;
end;
$$;

--
-- Name: FUNCTION commands_record_insert_row(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.commands_record_insert_row() IS 'Row-level form of commands_record_inserts() (used on Citus): the new command''s first history entry and its place in command_queue, under its kind''s provider group at its authority (authority_provider_kinds, 0049).';

--
-- Name: commands_record_inserts(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.commands_record_inserts() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
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

    insert into command_queue (authority_id, id, rank, ready_at, deadline_at, provider)
    select n.authority_id, n.id, ledger_claim_rank(n.created_at, n.not_before, n.priority), n.not_before, n.deadline_at,
           k.provider
    from new_rows n
    left join provider_kinds k on k.kind = n.kind;
    return null;
end;
$$;

--
-- Name: FUNCTION commands_record_inserts(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.commands_record_inserts() IS 'After each insert statement on commands: each new command''s first history entry (the head of its hash chain, its row digest computed once: 0025) and its place in command_queue, under its kind''s provider group if it has one (provider_kinds, 0048).';

--
-- Name: commands_retry_of_immutable(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.commands_retry_of_immutable() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
begin
    raise exception 'command % retry_of is immutable', old.id
        using errcode = 'CL003';
end;
$$;

--
-- Name: FUNCTION commands_retry_of_immutable(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.commands_retry_of_immutable() IS 'Refuses any change of commands.retry_of after insert.';

--
-- Name: commands_webhook_events(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.commands_webhook_events() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
declare
    endpoint record;
    entry_hash bytea;
    body jsonb;
    event_id uuid;
    first_key text;
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
            -- A failure the ledger retries is not the chain's outcome: its
            -- next attempt was written in the same statement (the record
            -- step, 0046), and that attempt's outcome is the one announced.
            if new.state = 'failed' and exists (
                select 1 from commands s
                where s.authority_id = new.authority_id
                  and s.retry_of = case when new.attempt > 1 then new.retry_of else new.id end
                  and s.attempt = new.attempt + 1) then
                return null;
            end if;
            -- The terminal entry, written by the history trigger before this
            -- one runs (see the head of migration 0029). A terminal state has
            -- no way out, so there is exactly one entry into it.
            select h.hash into entry_hash from command_history h
            where h.authority_id = new.authority_id and h.command_id = new.id and h.to_state = new.state
            order by h.command_id desc, h.seq desc
            limit 1;
            -- A later attempt answers under the key its chain was asked by.
            if new.attempt > 1 then
                select f.idempotency_key into first_key from commands f
                where f.authority_id = new.authority_id and f.id = new.retry_of;
            end if;
            body := jsonb_build_object(
                'command_id', new.id,
                'key', coalesce(first_key, new.idempotency_key),
                'attempts', new.attempt,
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
$$;

--
-- Name: FUNCTION commands_webhook_events(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.commands_webhook_events() IS 'After a command''s state becomes terminal: one webhook_events row per live endpoint of its scope that asks for its kind and state, with the hash of its terminal history entry, in the outcome''s transaction; none for a failure the record step retried (its next attempt exists: 0046), and a later attempt''s event carries its chain''s key and how many attempts the chain took (attempts). One index probe when the scope has no endpoint.';

--
-- Name: holds_guard(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.holds_guard() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
begin
    if tg_op = 'DELETE' then
        raise exception 'holds are kept: hold % cannot be deleted', old.id using errcode = 'CL006';
    end if;
    if old.state <> 'open' then
        raise exception 'hold % is % and cannot change', old.id, old.state using errcode = 'CL006';
    end if;
    if (new.id, new.scope, new.kind, new.authority_id, new.args, new.canonical, new.request_digest,
        new.intent_digest, new.resembles, new.created_at, new.not_before, new.priority)
       is distinct from
       (old.id, old.scope, old.kind, old.authority_id, old.args, old.canonical, old.request_digest,
        old.intent_digest, old.resembles, old.created_at, old.not_before, old.priority) then
        raise exception 'hold % request columns are immutable', old.id using errcode = 'CL006';
    end if;
    return new;
end;
$$;

--
-- Name: ledger_actor(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ledger_actor() RETURNS text
    LANGUAGE sql STABLE
    AS $$
    select coalesce(nullif(current_setting('command_ledger.actor', true), ''),
                    'sql:' || coalesce(nullif(current_setting('role', true), 'none'), session_user::text))
$$;

--
-- Name: FUNCTION ledger_actor(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ledger_actor() IS 'Actor for history rows: setting command_ledger.actor, else sql:<the role the session acts as>.';

--
-- Name: ledger_actors(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ledger_actors() RETURNS TABLE(command_id uuid, actor text)
    LANGUAGE sql STABLE
    AS $$
    select key::uuid, value
    from jsonb_each_text(coalesce(nullif(current_setting('command_ledger.actors', true), ''), '{}')::jsonb)
$$;

--
-- Name: FUNCTION ledger_actors(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ledger_actors() IS 'Per-command actors of a multi-row insert: setting command_ledger.actors ({"<command id>": actor}), as rows.';

--
-- Name: ledger_claim_rank(timestamp with time zone, timestamp with time zone, smallint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ledger_claim_rank(created_at timestamp with time zone, not_before timestamp with time zone, priority smallint) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    select floor(extract(epoch from greatest(created_at, not_before) at time zone 'UTC') * 1000)::bigint
           - priority::bigint * 10000
$$;

--
-- Name: FUNCTION ledger_claim_rank(created_at timestamp with time zone, not_before timestamp with time zone, priority smallint); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ledger_claim_rank(created_at timestamp with time zone, not_before timestamp with time zone, priority smallint) IS 'The claim rank of a queued command: the millisecond it became claimable (recorded, or not_before when later) less 10,000 per level of priority. Lower is claimed first; ties by id (src/domain/schedule.rs).';

--
-- Name: commands; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.commands (
    id uuid NOT NULL,
    scope uuid NOT NULL,
    idempotency_key text NOT NULL,
    request_digest bytea NOT NULL,
    digest_version smallint NOT NULL,
    kind text NOT NULL,
    authority_id text NOT NULL,
    authority_generation bigint,
    run_id text,
    args jsonb NOT NULL,
    canonical jsonb NOT NULL,
    state text DEFAULT 'pending'::text NOT NULL,
    result jsonb,
    error jsonb,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    deadline_at timestamp with time zone,
    finished_at timestamp with time zone,
    pinned_generation bigint,
    intent_digest bytea,
    canonical_rules text[] DEFAULT '{}'::text[] NOT NULL,
    intent_epoch integer,
    retry_of uuid,
    not_before timestamp with time zone,
    priority smallint DEFAULT 0 NOT NULL,
    identity_digest bytea,
    trace_parent text,
    trace_state text,
    attempt integer DEFAULT 1 NOT NULL,
    CONSTRAINT commands_attempt_follows_its_chain CHECK (((attempt >= 1) AND ((attempt = 1) OR (retry_of IS NOT NULL)))),
    CONSTRAINT commands_deadline_after_not_before CHECK (((not_before IS NULL) OR (deadline_at IS NULL) OR (deadline_at > not_before))),
    CONSTRAINT commands_finished_iff_terminal CHECK (((state = ANY (ARRAY['applied'::text, 'failed'::text, 'ambiguous'::text, 'cancelled'::text, 'expired'::text])) = (finished_at IS NOT NULL))),
    CONSTRAINT commands_generation_non_negative CHECK ((authority_generation >= 0)),
    CONSTRAINT commands_identity_digest_is_sha256 CHECK (((identity_digest IS NULL) OR (octet_length(identity_digest) = 32))),
    CONSTRAINT commands_prepared_has_generation CHECK (((state = ANY (ARRAY['pending'::text, 'cancelled'::text, 'expired'::text])) OR (authority_generation IS NOT NULL))),
    CONSTRAINT commands_result_only_when_applied CHECK (((result IS NULL) OR (state = 'applied'::text))),
    CONSTRAINT commands_state_known CHECK ((state = ANY (ARRAY['pending'::text, 'prepared'::text, 'effect_started'::text, 'applied'::text, 'failed'::text, 'ambiguous'::text, 'cancelled'::text, 'expired'::text])))
)
WITH (fillfactor='40');

--
-- Name: TABLE commands; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.commands IS 'The ledger: one row per command, written as pending before anything is dispatched.';

--
-- Name: COLUMN commands.id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.commands.id IS 'UUID v7 (time-ordered), assigned by the service.';

--
-- Name: COLUMN commands.scope; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.commands.scope IS 'The dedup space the command was recorded in: the submitting principal''s fleet id (kinds with dedup_scope = fleet) or its principal id (dedup_scope = principal). Keys are unique per scope, never globally.';

--
-- Name: COLUMN commands.idempotency_key; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.commands.idempotency_key IS 'Client-chosen key (1-255 bytes of printable ASCII); unique within the scope.';

--
-- Name: COLUMN commands.request_digest; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.commands.request_digest IS 'SHA-256 of the canonical request (kind, authority, args); decides replay vs conflict.';

--
-- Name: COLUMN commands.digest_version; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.commands.digest_version IS 'Version of the canonicalization that produced request_digest, so old rows stay comparable.';

--
-- Name: COLUMN commands.kind; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.commands.kind IS 'What the command does, e.g. refund; selects the effect executor.';

--
-- Name: COLUMN commands.authority_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.commands.authority_id IS 'The authority (executor) that may run the effect.';

--
-- Name: COLUMN commands.authority_generation; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.commands.authority_generation IS 'Authority generation bound when the command was prepared; null while pending. Fences stale executors.';

--
-- Name: COLUMN commands.run_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.commands.run_id IS 'Optional identifier of the client run (agent session) that sent the request.';

--
-- Name: COLUMN commands.args; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.commands.args IS 'Arguments as received (parsed JSON).';

--
-- Name: COLUMN commands.canonical; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.commands.canonical IS 'Canonical form of the request the digest was computed over.';

--
-- Name: COLUMN commands.state; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.commands.state IS 'Current state; changes are checked by commands_guard against command_transitions.';

--
-- Name: COLUMN commands.result; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.commands.result IS 'Executor result, set only when applied.';

--
-- Name: COLUMN commands.error; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.commands.error IS 'Why the command failed, became ambiguous, was cancelled or expired.';

--
-- Name: COLUMN commands.created_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.commands.created_at IS 'When the command was recorded: the service''s clock at admission, to the microsecond (0050; the time the identity digest covers), or the inserting transaction''s start when the insert names none.';

--
-- Name: COLUMN commands.updated_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.commands.updated_at IS 'Last change to the row (set by the trigger).';

--
-- Name: COLUMN commands.deadline_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.commands.deadline_at IS 'After this instant the command must not start; null for no deadline.';

--
-- Name: COLUMN commands.finished_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.commands.finished_at IS 'When the command reached a terminal state (set by the trigger); null until then.';

--
-- Name: COLUMN commands.pinned_generation; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.commands.pinned_generation IS 'Set when the submission pinned the authority generation: the command runs only under that generation, and expires (authority_superseded) if the authority moves on before its effect starts.';

--
-- Name: COLUMN commands.intent_digest; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.commands.intent_digest IS 'SHA-256 of the canonical intent: kind, authority and canonical args, without the run id. Equal for every spelling of one intent; null for rows of digest version 1.';

--
-- Name: COLUMN commands.canonical_rules; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.commands.canonical_rules IS 'The canonicalizer rules that fired on the args, as rule@path (money@/amount, drop_volatile@/trace_id, ...).';

--
-- Name: COLUMN commands.intent_epoch; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.commands.intent_epoch IS 'For commands admitted under the intent guard: which command of this intent (1, 2, ...) it is in its scope. Unique per (scope, intent_digest); null for commands admitted by key alone.';

--
-- Name: COLUMN commands.retry_of; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.commands.retry_of IS 'The command of the same intent this one retries: that one ended with nothing done (failed, expired, cancelled, or ambiguous and resolved not_applied), and the kind releases such intents (on_failure = release). Null otherwise. Not a foreign key: the retried command may be pruned first.';

--
-- Name: COLUMN commands.not_before; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.commands.not_before IS 'The command is not claimed before this instant (null: as soon as possible). Fixed when recorded.';

--
-- Name: COLUMN commands.priority; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.commands.priority IS 'Higher is claimed first within an authority, with aging (see ledger_claim_rank): -100 to 100, the kind''s priority unless the command asked for another within the kind''s max_priority. Fixed when recorded.';

--
-- Name: COLUMN commands.identity_digest; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.commands.identity_digest IS 'SHA-256 of the immutable columns (identity-v2, ledger_identity_digest): written with the pending row by the service (0050), or by the first engine step that moves a command inserted without it (0030); row-v2 history digests cover it and the columns a transition changes. A cache: verify recomputes it from the columns and never reads it, so a stored digest that differs is reported, not trusted.';

--
-- Name: COLUMN commands.trace_parent; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.commands.trace_parent IS 'The W3C traceparent the command was submitted with (version 00 form), or null: the caller''s trace, which the custodian''s spans and the provider''s request join. Not part of the fingerprint.';

--
-- Name: COLUMN commands.trace_state; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.commands.trace_state IS 'The W3C tracestate sent beside trace_parent (at most 32 members, 512 characters), or null.';

--
-- Name: COLUMN commands.attempt; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.commands.attempt IS 'Which attempt of its chain the command is: 1 for a command a caller submitted, n > 1 for one the record step scheduled after attempt n - 1 failed with nothing done (the kind''s retry policy); such a command names the chain''s first command in retry_of.';

--
-- Name: CONSTRAINT commands_state_known ON commands; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON CONSTRAINT commands_state_known ON public.commands IS 'The states of command_states (frozen reference data), without a lock on it per change.';

--
-- Name: ledger_claim_start(text[], text, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ledger_claim_start(p_authorities text[], p_holder text, p_limit integer) RETURNS SETOF public.commands
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_seqscan TO 'off'
    SET enable_bitmapscan TO 'off'
    SET enable_hashjoin TO 'off'
    SET enable_mergejoin TO 'off'
    AS $$
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
$$;

--
-- Name: FUNCTION ledger_claim_start(p_authorities text[], p_holder text, p_limit integer); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ledger_claim_start(p_authorities text[], p_holder text, p_limit integer) IS 'Engine step (0030): up to p_limit queued commands of the authorities p_holder leases, lowest claim rank first, moved pending -> prepared -> effect_started under the lease''s generation (one history entry naming both transitions, 0045), or pending -> expired (deadline passed, pinned generation not the lease''s), with the queue and in-flight tables kept. Returns the rows as they now are. Fenced by the lease row held for share; no effect starts before it commits. A provider group''s commands (0048) are taken only as far as its limits allow (in flight across every custodian, and its token bucket), under a lock of its provider_limits row; the others stay queued in their place.';

--
-- Name: ledger_claim_start_authority(text, text, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ledger_claim_start_authority(p_authority text, p_holder text, p_limit integer) RETURNS SETOF public.commands
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
            select * from ledger_claim_start(array[p_authority], p_holder, p_limit)
        $$;

--
-- Name: FUNCTION ledger_claim_start_authority(p_authority text, p_holder text, p_limit integer); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ledger_claim_start_authority(p_authority text, p_holder text, p_limit integer) IS 'Engine step (0033): ledger_claim_start for the one authority p_authority. On Citus it runs on the worker holding the authority''s shards (delegated by ledger_delegate_engine_steps()), in single-table statements; on one node it is ledger_claim_start(array[p_authority], ...).';

--
-- Name: ledger_count_history(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ledger_count_history() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
begin
    insert into ledger_counts (minute, counter, source, n)
    select date_trunc('minute', now()), c.counter, 'pg:' || pg_backend_pid(), count(*)
    from (
        select case when e.to_state = 'effect_started' then 'executions' else e.to_state end as counter
        from new_rows e
        where e.to_state in ('effect_started', 'applied', 'failed', 'ambiguous')
        union all
        select ledger_latency_bucket(extract(epoch from (e.at - c.created_at)) * 1000)
        from new_rows e join commands c on c.id = e.command_id
        where e.to_state = 'applied'
    ) c
    group by c.counter
    on conflict (minute, counter, source) do update set n = ledger_counts.n + excluded.n;
    return null;
end;
$$;

--
-- Name: FUNCTION ledger_count_history(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ledger_count_history() IS 'After each insert statement on command_history: adds its executions (effect_started), applied, failed and ambiguous entries, and the latency bucket of each applied command, to this backend''s ledger_counts row of the minute.';

--
-- Name: ledger_counts_compact(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ledger_counts_compact() RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
declare
    folded bigint := 0;
    written bigint;
    finished timestamptz := date_trunc('minute', now()) - interval '2 minutes';
    past_a_day timestamptz := date_trunc('day', now(), 'UTC') - interval '1 day';
begin
    with old as (
        delete from ledger_counts_by_authority
        where minute < finished
        returning minute, counter, n
    )
    insert into ledger_counts (minute, counter, source, n)
    select minute, counter, '', sum(n) from old group by minute, counter
    on conflict (minute, counter, source) do update set n = ledger_counts.n + excluded.n;
    get diagnostics written = row_count;
    folded := folded + written;

    with old as (
        delete from ledger_counts
        where source <> '' and minute < finished
        returning minute, counter, n
    )
    insert into ledger_counts (minute, counter, source, n)
    select minute, counter, '', sum(n) from old group by minute, counter
    on conflict (minute, counter, source) do update set n = ledger_counts.n + excluded.n;
    get diagnostics written = row_count;
    folded := folded + written;

    with old as (
        delete from ledger_counts
        where source = '' and minute < past_a_day
          and minute <> date_trunc('day', minute, 'UTC')
        returning minute, counter, n
    )
    insert into ledger_counts (minute, counter, source, n)
    select date_trunc('day', minute, 'UTC'), counter, '', sum(n) from old group by 2, 1
    on conflict (minute, counter, source) do update set n = ledger_counts.n + excluded.n;
    get diagnostics written = row_count;
    return folded + written;
end;
$$;

--
-- Name: FUNCTION ledger_counts_compact(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ledger_counts_compact() IS 'Folds ledger_counts: the shards'' counts (ledger_counts_by_authority) and other sources'' finished minutes into one row per minute and counter (source empty), minutes older than a day into one row per day. Sums are unchanged. Called by API processes about once a minute.';

--
-- Name: ledger_delegate_engine_steps(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ledger_delegate_engine_steps() RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
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
          and p.proname in ('ledger_claim_start_authority', 'ledger_record_outcomes', 'ledger_next_attempt',
                            'ledger_regroup_authority')
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

--
-- Name: FUNCTION ledger_delegate_engine_steps(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ledger_delegate_engine_steps() IS 'On a Citus coordinator, after ledger_distribute(): the engine steps (ledger_claim_start_authority, ledger_record_outcomes, ledger_next_attempt, ledger_regroup_authority) are run by the worker holding p_authority''s shards, the whole call in one round trip, also inside a transaction block (force_delegation), executable by ledger_custodian only on every node. Returns how many it delegated. Idempotent.';

--
-- Name: ledger_distribute(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ledger_distribute() RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
declare
    t record;
    v record;
    f regprocedure;
    done int := 0;
begin
    if not exists (select 1 from pg_extension where extname = 'citus') then
        raise exception 'ledger_distribute() needs a Citus coordinator (create extension citus; add the workers)'
            using errcode = 'CL013';
    end if;
    -- Every process migrates when it starts: one distributes, the others
    -- then find the work done.
    perform pg_advisory_xact_lock(7242019);
    create temporary table ledger_views_before on commit drop as
    select c.relname::text as view_name, a.privilege_type, a.grantee::regrole::text as grantee,
           obj_description(c.oid, 'pg_class') as description
    from pg_class c
    left join lateral aclexplode(c.relacl) a on a.grantee <> c.relowner and a.grantee <> 0
    where c.relkind = 'v' and c.relnamespace = 'public'::regnamespace
      and not exists (select 1 from pg_depend d where d.objid = c.oid and d.deptype = 'e');
    -- Row-level triggers of a distributed table run on its shards.
    set local citus.enable_unsafe_triggers = on;
    for t in select * from ledger_distribution order by position loop
        if to_regclass(t.table_name) is null
           or exists (select 1 from pg_dist_partition p
                      where p.logicalrelid = t.table_name::regclass
                        and case t.method when 'reference' then p.repmodel = 't' else p.partmethod = 'h' end) then
            continue;
        end if;
        -- A table with a foreign key to a reference table may already be a
        -- "Citus local table" (Citus converts it when the referenced table is
        -- distributed first): create_reference_table takes it from there.
        for i in 1 .. coalesce(array_length(t.rekey, 1), 0) loop
            execute t.rekey[i];
        end loop;
        -- The copy into the shards would trip the tables' own refusals (the
        -- frozen reference data refuses every insert).
        execute format('alter table %I disable trigger user', t.table_name);
        if t.method = 'reference' then
            perform create_reference_table(t.table_name::regclass);
        else
            perform create_distributed_table(t.table_name::regclass, t.distribution_column,
                                             colocate_with => coalesce(t.colocate_with, 'none'));
        end if;
        execute format('alter table %I enable trigger user', t.table_name);
        done := done + 1;
    end loop;
    -- Views re-created on the way get back their grants and comments.
    for v in select * from ledger_views_before b where to_regclass(b.view_name) is not null loop
        if v.grantee is not null and not has_table_privilege(v.grantee, v.view_name, v.privilege_type) then
            execute format('grant %s on %I to %I', v.privilege_type, v.view_name, v.grantee);
        end if;
        if v.description is not null and obj_description(v.view_name::regclass, 'pg_class') is null then
            execute format('comment on view %I is %L', v.view_name, v.description);
        end if;
    end loop;
    -- Functions created before any table was distributed exist only on the
    -- coordinator: the shards' triggers call them on the workers. (After the
    -- tables: a function of a table's row type needs its table distributed.)
    for f in
        select p.oid::regprocedure from pg_proc p
        where p.pronamespace = 'public'::regnamespace
          and not exists (select 1 from pg_depend d where d.objid = p.oid and d.deptype = 'e')
          and not exists (select 1 from pg_dist_object o where o.classid = 'pg_proc'::regclass and o.objid = p.oid)
    loop
        perform create_distributed_function(f);
    end loop;
    return done;
end;
$$;

--
-- Name: FUNCTION ledger_distribute(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ledger_distribute() IS 'On a Citus coordinator: distributes every table of ledger_distribution not distributed yet (rekeying it first), gives the views it re-creates on the way back their grants and comments, and makes the ledger''s functions known to the workers. Returns how many tables it distributed. Idempotent.';

--
-- Name: ledger_entry_hash(bytea, uuid, text, text, timestamp with time zone, text, bigint, text, bytea); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ledger_entry_hash(prev_hash bytea, command_id uuid, from_state text, to_state text, at timestamp with time zone, actor text, authority_generation bigint, reason text, row_digest bytea) RETURNS bytea
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
    select sha256(convert_to(jsonb_build_array(
        'entry-v1', encode(prev_hash, 'hex'), command_id, from_state, to_state, ledger_utc(at), actor,
        authority_generation, reason, encode(row_digest, 'hex'))::text, 'UTF8'))
$$;

--
-- Name: FUNCTION ledger_entry_hash(prev_hash bytea, command_id uuid, from_state text, to_state text, at timestamp with time zone, actor text, authority_generation bigint, reason text, row_digest bytea); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ledger_entry_hash(prev_hash bytea, command_id uuid, from_state text, to_state text, at timestamp with time zone, actor text, authority_generation bigint, reason text, row_digest bytea) IS 'SHA-256 of the canonical text of a history entry including the previous entry''s hash: command_history.hash.';

--
-- Name: ledger_entry_hash_v2(bytea, uuid, text, text, text, timestamp with time zone, text, bigint, text, bytea); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ledger_entry_hash_v2(prev_hash bytea, command_id uuid, from_state text, through text, to_state text, at timestamp with time zone, actor text, authority_generation bigint, reason text, row_digest bytea) RETURNS bytea
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
    select sha256(convert_to(jsonb_build_array(
        'entry-v2', encode(prev_hash, 'hex'), command_id, from_state, through, to_state, ledger_utc(at), actor,
        authority_generation, reason, encode(row_digest, 'hex'))::text, 'UTF8'))
$$;

--
-- Name: FUNCTION ledger_entry_hash_v2(prev_hash bytea, command_id uuid, from_state text, through text, to_state text, at timestamp with time zone, actor text, authority_generation bigint, reason text, row_digest bytea); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ledger_entry_hash_v2(prev_hash bytea, command_id uuid, from_state text, through text, to_state text, at timestamp with time zone, actor text, authority_generation bigint, reason text, row_digest bytea) IS 'entry-v2 (0045): SHA-256 of the canonical text of a history entry that names the state it passed through (command_history.through), including the previous entry''s hash: command_history.hash of such an entry. Entries without it are entry-v1 (ledger_entry_hash).';

--
-- Name: ledger_history_id(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ledger_history_id() RETURNS bigint
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$ select nextval('command_history_id_seq') $$;

--
-- Name: FUNCTION ledger_history_id(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ledger_history_id() IS 'The next id of command_history, drawn by its owner, from the node''s range of the sequence: for the engine steps'' copies that write its shards by name (0039).';

--
-- Name: ledger_history_ids_drawn(text, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ledger_history_ids_drawn(p_body text, p_history text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
declare
    marker constant text := 'insert into ' || p_history || ' (authority_id,';
    pieces text[] := string_to_array(p_body, marker);
    piece text;
    out text := pieces[1];
    at_values integer;
    at_select integer;
begin
    for i in 2 .. coalesce(cardinality(pieces), 0) loop
        piece := pieces[i];
        at_values := strpos(piece, 'values (p_authority,');
        at_select := strpos(piece, 'select p_authority,');
        if at_values > 0 and (at_select = 0 or at_values < at_select) then
            piece := overlay(piece placing 'values (ledger_history_id(), p_authority,' from at_values
                             for length('values (p_authority,'));
        elsif at_select > 0 then
            piece := overlay(piece placing 'select ledger_history_id(), p_authority,' from at_select
                             for length('select p_authority,'));
        else
            raise exception 'an insert into % whose first value is not p_authority', p_history;
        end if;
        out := out || 'insert into ' || p_history || ' (id, authority_id,' || piece;
    end loop;
    return out;
end;
$$;

--
-- Name: FUNCTION ledger_history_ids_drawn(p_body text, p_history text); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ledger_history_ids_drawn(p_body text, p_history text) IS 'For ledger_make_shard_steps_here() (0039): a step''s body whose inserts into the history shard p_history (columns from authority_id, first value p_authority) give the id too, drawn by ledger_history_id(): a shard table has no default for it (Citus computes it for statements through it).';

--
-- Name: ledger_identity_digest(uuid, uuid, text, bytea, integer, text, text, text, jsonb, jsonb, timestamp with time zone, timestamp with time zone, bigint, bytea, text[], integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ledger_identity_digest(id uuid, scope uuid, idempotency_key text, request_digest bytea, digest_version integer, kind text, authority_id text, run_id text, args jsonb, canonical jsonb, created_at timestamp with time zone, deadline_at timestamp with time zone, pinned_generation bigint, intent_digest bytea, canonical_rules text[], intent_epoch integer) RETURNS bytea
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
    select sha256(convert_to(jsonb_build_array(
        'identity-v2', id, scope, idempotency_key, encode(request_digest, 'hex'), digest_version, kind,
        authority_id, run_id, args, canonical,
        to_char(created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        to_char(deadline_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        pinned_generation, encode(intent_digest, 'hex'), canonical_rules, intent_epoch)::text, 'UTF8'))
$$;

--
-- Name: FUNCTION ledger_identity_digest(id uuid, scope uuid, idempotency_key text, request_digest bytea, digest_version integer, kind text, authority_id text, run_id text, args jsonb, canonical jsonb, created_at timestamp with time zone, deadline_at timestamp with time zone, pinned_generation bigint, intent_digest bytea, canonical_rules text[], intent_epoch integer); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ledger_identity_digest(id uuid, scope uuid, idempotency_key text, request_digest bytea, digest_version integer, kind text, authority_id text, run_id text, args jsonb, canonical jsonb, created_at timestamp with time zone, deadline_at timestamp with time zone, pinned_generation bigint, intent_digest bytea, canonical_rules text[], intent_epoch integer) IS 'identity-v2: SHA-256 of the JSON array of a command''s immutable columns (row-v1''s columns but for state, generation, result, error and finished_at).';

--
-- Name: ledger_latency_bucket(double precision); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ledger_latency_bucket(ms double precision) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    select case
        when ms <= 10 then 'latency_le_10'
        when ms <= 25 then 'latency_le_25'
        when ms <= 50 then 'latency_le_50'
        when ms <= 100 then 'latency_le_100'
        when ms <= 250 then 'latency_le_250'
        when ms <= 500 then 'latency_le_500'
        when ms <= 1000 then 'latency_le_1000'
        when ms <= 2500 then 'latency_le_2500'
        when ms <= 5000 then 'latency_le_5000'
        when ms <= 10000 then 'latency_le_10000'
        when ms <= 30000 then 'latency_le_30000'
        when ms <= 60000 then 'latency_le_60000'
        else 'latency_le_inf'
    end
$$;

--
-- Name: FUNCTION ledger_latency_bucket(ms double precision); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ledger_latency_bucket(ms double precision) IS 'The ledger_counts histogram bucket of a submit-to-applied latency in milliseconds.';

--
-- Name: ledger_make_shard_steps_here(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ledger_make_shard_steps_here() RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $_$
declare
    steps constant text[] := array['ledger_claim_start_authority', 'ledger_record_outcomes'];
    here integer := (select l.groupid from pg_dist_local_group l);
    g record;
    step text;
    copy text;
    made_oid regprocedure;
    made regprocedure[] := '{}';
    old regprocedure;
begin
    if not exists (select 1 from pg_extension where extname = 'citus') then
        raise exception 'ledger_make_shard_steps_here() needs Citus' using errcode = 'CL013';
    end if;
    -- One maker at a time on this node; the copies are this node's alone.
    perform pg_advisory_xact_lock(hashtext('ledger_make_shard_steps'));
    perform set_config('citus.enable_ddl_propagation', 'off', true);
    for g in select * from ledger_shard_groups_here() loop
        foreach step in array steps loop
            copy := step || '_s' || g.shardid;
            -- A copy of another signature (the step's changed) goes first.
            for old in
                select p.oid::regprocedure from pg_proc p
                where p.pronamespace = 'public'::regnamespace and p.proname = copy
                  and pg_get_function_identity_arguments(p.oid)
                      <> pg_get_function_identity_arguments(to_regproc('public.' || step))
            loop
                execute format('drop function %s', old);
            end loop;
            execute ledger_shard_step_copy(pg_get_functiondef(to_regproc('public.' || step)), step,
                                           g.shardid, g.lo, g.hi, g.shards, here);
            made_oid := to_regproc('public.' || copy)::regprocedure;
            execute format('alter function %s owner to ledger_engine', made_oid);
            execute format('revoke all on function %s from public', made_oid);
            execute format('grant execute on function %s to ledger_custodian', made_oid);
            made := made || made_oid;
        end loop;
    end loop;
    -- The copies of groups no longer (wholly) here.
    for old in
        select p.oid::regprocedure from pg_proc p
        where p.pronamespace = 'public'::regnamespace
          and p.proname ~ '^ledger_(claim_start_authority|record_outcomes)_s[0-9]+$'
          and p.oid::regprocedure <> all (made)
    loop
        execute format('drop function %s', old);
    end loop;
    return cardinality(made);
end;
$_$;

--
-- Name: FUNCTION ledger_make_shard_steps_here(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ledger_make_shard_steps_here() IS 'On a node of a Citus cluster: makes (or refreshes) this node''s copies of the engine steps that name the shards of each group of commands placed here (ledger_claim_start_authority_s<shard>, ledger_record_outcomes_s<shard>; 0039), each as ledger_shard_step_copy() makes it from the step today, and drops the copies of groups no longer here. Returns how many copies it made. Run on every node by `command-ledger migrate`, as the owner while it is a member of ledger_engine.';

--
-- Name: ledger_next_attempt(text, uuid, double precision, double precision); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ledger_next_attempt(p_authority text, p_id uuid, p_retry_in double precision, p_retry_within double precision) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
declare
    at timestamptz := now();
begin
    -- The attempt after p_id, which the calling statement has just recorded
    -- failed with nothing done (not dispatched, or not applied): a
    -- command of its own, pending, not claimed before p_retry_in seconds
    -- from now, naming the chain's first command; none when it could not
    -- start before the chain's deadline (the command's, tightened on the
    -- first attempt to its creation plus p_retry_within seconds), and none
    -- when the chain already has it (commands_attempts is unique).
    insert into commands (id, scope, idempotency_key, request_digest, digest_version, kind, authority_id,
                          run_id, args, canonical, deadline_at, pinned_generation, intent_digest,
                          canonical_rules, retry_of, not_before, priority, trace_parent, trace_state,
                          attempt)
    select ledger_uuid_v7(), c.scope, 'attempt:' || n.first || ':' || (c.attempt + 1), c.request_digest,
           c.digest_version, c.kind, c.authority_id, c.run_id, c.args, c.canonical, n.deadline,
           c.pinned_generation, c.intent_digest, c.canonical_rules, n.first, n.ready, c.priority,
           c.trace_parent, c.trace_state, c.attempt + 1
    from commands c
    cross join lateral (
        select case when c.attempt > 1 then c.retry_of else c.id end as first,
               at + make_interval(secs => p_retry_in) as ready,
               case when c.attempt = 1 and p_retry_within is not null
                    then least(c.deadline_at, c.created_at + make_interval(secs => p_retry_within))
                    else c.deadline_at end as deadline
    ) n
    where c.authority_id = p_authority and c.id = p_id
      and c.state = 'failed' and c.error ->> 'reason' in ('not_dispatched', 'not_applied')
      and p_retry_in is not null
      and (n.deadline is null or n.ready < n.deadline)
    on conflict do nothing;
    return found;
end;
$$;

--
-- Name: FUNCTION ledger_next_attempt(p_authority text, p_id uuid, p_retry_in double precision, p_retry_within double precision); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ledger_next_attempt(p_authority text, p_id uuid, p_retry_in double precision, p_retry_within double precision) IS 'Engine step (0046): writes the next attempt of p_authority''s command p_id, which the calling statement has just recorded failed with nothing done (error.reason not_dispatched or not_applied; the record step, and recovery''s resolution by the reconcile probe): a pending command of attempt + 1 naming its chain''s first command in retry_of, not claimed before p_retry_in seconds from now; not written when it could not start before the chain''s deadline (deadline_at, on a first attempt tightened to created_at + p_retry_within seconds) or when the chain has it already. Returns whether it wrote one.';

--
-- Name: ledger_provider_in_flight(text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ledger_provider_in_flight(p_provider text) RETURNS bigint
    LANGUAGE sql STABLE
    AS $$
    select count(*) from command_in_flight f
    join commands c on c.authority_id = f.authority_id and c.id = f.id
    join provider_kinds k on k.kind = c.kind
    where k.provider = p_provider
$$;

--
-- Name: FUNCTION ledger_provider_in_flight(p_provider text); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ledger_provider_in_flight(p_provider text) IS 'How many commands of the provider group p_provider (0048) are claimed and not terminal, on every authority: what its max_in_flight bounds.';

--
-- Name: ledger_provider_tokens(double precision, double precision, integer, timestamp with time zone, timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ledger_provider_tokens(tokens double precision, rate double precision, burst integer, refilled_at timestamp with time zone, at timestamp with time zone) RETURNS double precision
    LANGUAGE sql IMMUTABLE
    AS $$
    -- No rate: no bucket (least() would pass over the null).
    select case when rate is not null then
               least(burst::double precision,
                     tokens + rate * greatest(0, extract(epoch from at - refilled_at)::double precision))
           end
$$;

--
-- Name: FUNCTION ledger_provider_tokens(tokens double precision, rate double precision, burst integer, refilled_at timestamp with time zone, at timestamp with time zone); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ledger_provider_tokens(tokens double precision, rate double precision, burst integer, refilled_at timestamp with time zone, at timestamp with time zone) IS 'The tokens in a provider group''s bucket (0048) at `at`: those left at refilled_at plus rate a second since, at most burst; null for a group with no rate.';

--
-- Name: ledger_reason(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ledger_reason() RETURNS text
    LANGUAGE sql STABLE
    AS $$
    select nullif(current_setting('command_ledger.reason', true), '')
$$;

--
-- Name: FUNCTION ledger_reason(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ledger_reason() IS 'Reason for history rows: setting command_ledger.reason, or null.';

--
-- Name: ledger_record_outcomes(text, bigint, jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ledger_record_outcomes(p_authority text, p_generation bigint, p_outcomes jsonb) RETURNS SETOF uuid
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    SET enable_seqscan TO 'off'
    SET enable_bitmapscan TO 'off'
    AS $$
declare
    at timestamptz := now();
    who text := ledger_actor();
    why text := ledger_reason();
begin
    return query
    with outcome as materialized (
        select o.id, o.state, o.result, o.error, o.retry_in, o.retry_within
        from jsonb_to_recordset(p_outcomes)
             as o (id uuid, state text, result jsonb, error jsonb, retry_in float8, retry_within float8)
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
    next_attempts as (
        -- The attempt after each failure the custodian found retryable (a
        -- failure with nothing done, under the kind's retry policy).
        select ledger_next_attempt(p_authority, f.id, f.retry_in, f.retry_within)
        from fenced f
        where f.state = 'failed' and f.retry_in is not null
          and f.id = any (array(select m.id from moved m))
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
      and (select count(*) from counted) >= 0 and (select count(*) from told) >= 0
      and (select count(*) from next_attempts) >= 0;
end;
$$;

--
-- Name: FUNCTION ledger_record_outcomes(p_authority text, p_generation bigint, p_outcomes jsonb); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ledger_record_outcomes(p_authority text, p_generation bigint, p_outcomes jsonb) IS 'Engine step (0030): records the outcomes (a JSON array of {id, state, result, error, retry_in, retry_within}; state applied, failed or ambiguous) of p_authority''s effect_started commands, only while the authority is at p_generation, with one history entry each, the in-flight rows removed and a NOTIFY command_ledger_outcome each. A failure with retry_in (seconds) gets its next attempt (0046, ledger_next_attempt). Returns the ids recorded. Run it in a SERIALIZABLE transaction.';

--
-- Name: ledger_remember_coalesced(text, uuid, bytea, uuid, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ledger_remember_coalesced(p_authority_id text, p_scope uuid, p_request_digest bytea, p_command_id uuid, p_run_id text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
begin
    if not exists (select 1 from commands c
                   where c.id = p_command_id and c.scope = p_scope and c.authority_id = p_authority_id) then
        raise exception 'command % is not of scope % and authority %', p_command_id, p_scope, p_authority_id
            using errcode = 'CL009';
    end if;
    insert into coalesced_requests (authority_id, scope, request_digest, command_id, run_id)
    values (p_authority_id, p_scope, p_request_digest, p_command_id, p_run_id)
    on conflict do nothing;
end;
$$;

--
-- Name: FUNCTION ledger_remember_coalesced(p_authority_id text, p_scope uuid, p_request_digest bytea, p_command_id uuid, p_run_id text); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ledger_remember_coalesced(p_authority_id text, p_scope uuid, p_request_digest bytea, p_command_id uuid, p_run_id text) IS 'Remembers that a request (scope, authority, request digest, run id) was answered with a command of the same scope and authority (CL009 otherwise); the only way a service role writes coalesced_requests.';

--
-- Name: ledger_resolution_hash(bytea, uuid, text, text, text, text, text, timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ledger_resolution_hash(anchor_hash bytea, command_id uuid, outcome text, evidence text, reference text, source text, actor text, at timestamp with time zone) RETURNS bytea
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
    select sha256(convert_to(jsonb_build_array(
        'resolution-v1', encode(anchor_hash, 'hex'), command_id, outcome, evidence, reference, source, actor,
        ledger_utc(at))::text, 'UTF8'))
$$;

--
-- Name: FUNCTION ledger_resolution_hash(anchor_hash bytea, command_id uuid, outcome text, evidence text, reference text, source text, actor text, at timestamp with time zone); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ledger_resolution_hash(anchor_hash bytea, command_id uuid, outcome text, evidence text, reference text, source text, actor text, at timestamp with time zone) IS 'SHA-256 of the canonical text of a resolution including its anchor (the ambiguous entry''s hash).';

--
-- Name: ledger_row_digest(public.commands); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ledger_row_digest(c public.commands) RETURNS bytea
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
    select sha256(convert_to(jsonb_build_array(
        'row-v1', c.id, c.scope, c.idempotency_key, encode(c.request_digest, 'hex'), c.digest_version,
        c.kind, c.authority_id, c.authority_generation, c.run_id, c.args, c.canonical, c.state,
        c.result, c.error, ledger_utc(c.created_at), ledger_utc(c.deadline_at), ledger_utc(c.finished_at),
        c.pinned_generation, encode(c.intent_digest, 'hex'), c.canonical_rules, c.intent_epoch)::text, 'UTF8'))
$$;

--
-- Name: FUNCTION ledger_row_digest(c public.commands); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ledger_row_digest(c public.commands) IS 'SHA-256 of the canonical text of a command row (every column but updated_at), as stored in command_history.row_digest.';

--
-- Name: ledger_row_digest_v2(bytea, text, bigint, jsonb, jsonb, timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ledger_row_digest_v2(identity bytea, state text, generation bigint, result jsonb, error jsonb, finished_at timestamp with time zone) RETURNS bytea
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
    select sha256(convert_to(jsonb_build_array(
        'row-v2', encode(identity, 'hex'), state, generation, result, error,
        to_char(finished_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))::text, 'UTF8'))
$$;

--
-- Name: FUNCTION ledger_row_digest_v2(identity bytea, state text, generation bigint, result jsonb, error jsonb, finished_at timestamp with time zone); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ledger_row_digest_v2(identity bytea, state text, generation bigint, result jsonb, error jsonb, finished_at timestamp with time zone) IS 'row-v2: SHA-256 of the JSON array of the identity-v2 digest (hex) and the columns a transition changes. Written by the engine steps (0030); verify accepts row-v1 or row-v2 for a command''s last entry.';

--
-- Name: ledger_set_providers(jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ledger_set_providers(p_providers jsonb) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
declare
    at timestamptz := now();
    moved bigint := 0;
    regrouped bigint := 0;
begin
    -- p_providers: the catalog's groups, each
    -- {"name", "max_in_flight", "rate", "burst", "kinds": [...]}; a group
    -- the catalog no longer names goes, and its kinds are under no limit.
    -- A bucket keeps its tokens (no more than its new burst); a new one
    -- starts full.
    delete from provider_kinds k
    where (k.kind, k.provider) not in (
        select kind, g ->> 'name' from jsonb_array_elements(p_providers) g,
               jsonb_array_elements_text(coalesce(g -> 'kinds', '[]')) kind);
    get diagnostics moved = row_count;

    insert into provider_limits as p (name, max_in_flight, rate, burst, tokens, refilled_at, updated_at)
    select g.name, g.max_in_flight, g.rate, coalesce(g.burst, 1), coalesce(g.burst, 1), at, at
    from jsonb_to_recordset(p_providers) as g(name text, max_in_flight integer, rate double precision, burst integer)
    on conflict (name) do update
        set max_in_flight = excluded.max_in_flight, rate = excluded.rate, burst = excluded.burst,
            tokens = least(p.tokens, excluded.burst), updated_at = at
        where (p.max_in_flight, p.rate, p.burst) is distinct from (excluded.max_in_flight, excluded.rate, excluded.burst);

    delete from provider_limits p
    where p.name not in (select g ->> 'name' from jsonb_array_elements(p_providers) g);

    insert into provider_kinds (kind, provider)
    select kind, g ->> 'name' from jsonb_array_elements(p_providers) g,
           jsonb_array_elements_text(coalesce(g -> 'kinds', '[]')) kind
    on conflict (kind) do nothing;
    get diagnostics regrouped = row_count;

    -- Queued commands of a kind whose group changed follow it.
    if moved + regrouped > 0 then
        update command_queue q set provider = k.provider
        from commands c
        left join provider_kinds k on k.kind = c.kind
        where c.authority_id = q.authority_id and c.id = q.id and q.provider is distinct from k.provider;
        get diagnostics moved = row_count;
        return moved;
    end if;
    return 0;
end;
$$;

--
-- Name: FUNCTION ledger_set_providers(p_providers jsonb); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ledger_set_providers(p_providers jsonb) IS 'Engine step (0048): the custodian''s catalog''s provider groups written to provider_limits and provider_kinds (the groups it no longer names removed), and the queued commands of a kind whose group changed moved to it. Returns how many queued commands moved.';

--
-- Name: ledger_shard_groups_here(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ledger_shard_groups_here(OUT shardid bigint, OUT lo integer, OUT hi integer, OUT shards jsonb) RETURNS SETOF record
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
declare
    tables constant text[] := array['commands', 'command_history', 'command_queue', 'command_in_flight',
                                    'ledger_counts_by_authority', 'authorities'];
    here integer := (select l.groupid from pg_dist_local_group l);
    g record;
    t text;
    shard text;
begin
    -- Each group of shards of commands placed here, with its hash range.
    for g in
        select s.shardid, s.shardminvalue::integer as lo, s.shardmaxvalue::integer as hi
        from pg_dist_shard s join pg_dist_placement p on p.shardid = s.shardid
        where s.logicalrelid = 'commands'::regclass and p.groupid = here
        order by s.shardid
    loop
        -- The same range of every table of the steps, co-located and here.
        shards := '{}';
        foreach t in array tables loop
            select shard_name(s.logicalrelid, s.shardid) into shard
            from pg_dist_shard s
            join pg_dist_partition d on d.logicalrelid = s.logicalrelid
            join pg_dist_placement p on p.shardid = s.shardid and p.groupid = here
            where s.logicalrelid = t::regclass
              and d.colocationid = (select colocationid from pg_dist_partition where logicalrelid = 'commands'::regclass)
              and s.shardminvalue::integer = g.lo and s.shardmaxvalue::integer = g.hi;
            exit when shard is null or to_regclass(shard) is null;
            shards := shards || jsonb_build_object(t, shard);
        end loop;
        continue when shard is null or to_regclass(shard) is null;
        shardid := g.shardid;
        lo := g.lo;
        hi := g.hi;
        return next;
    end loop;
end;
$$;

--
-- Name: FUNCTION ledger_shard_groups_here(OUT shardid bigint, OUT lo integer, OUT hi integer, OUT shards jsonb); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ledger_shard_groups_here(OUT shardid bigint, OUT lo integer, OUT hi integer, OUT shards jsonb) IS 'On a node of a Citus cluster: each group of the engine steps'' tables whose shards are all placed here, by its shard of commands, with its hash range and its shards'' names by table (0039).';

--
-- Name: ledger_shard_step_copies_current(bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ledger_shard_step_copies_current(p_shard bigint) RETURNS boolean
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
declare
    steps constant text[] := array['ledger_claim_start_authority', 'ledger_record_outcomes'];
    here integer := (select l.groupid from pg_dist_local_group l);
    g record;
    step text;
    copies oid[];
begin
    select * into g from ledger_shard_groups_here() h where h.shardid = p_shard;
    if not found then
        return false;
    end if;
    foreach step in array steps loop
        copies := array(select p.oid from pg_proc p
                        where p.pronamespace = 'public'::regnamespace and p.proname = step || '_s' || p_shard);
        -- One copy, whose definition is what the step makes of it today.
        if cardinality(copies) <> 1
           or md5(pg_get_functiondef(copies[1]))
              <> md5(ledger_shard_step_copy(pg_get_functiondef(to_regproc('public.' || step)), step,
                                            g.shardid, g.lo, g.hi, g.shards, here)) then
            return false;
        end if;
    end loop;
    return true;
end;
$$;

--
-- Name: FUNCTION ledger_shard_step_copies_current(p_shard bigint); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ledger_shard_step_copies_current(p_shard bigint) IS 'On a node of a Citus cluster: whether the shard group of commands shard p_shard is placed here and both copies of the engine steps that name its shards are what ledger_shard_step_copy() makes of the steps today (0039): none missing, none made from another text of a step. A custodian runs a group''s copies only then, and the steps as they are otherwise.';

--
-- Name: ledger_shard_step_copy(text, text, bigint, integer, integer, jsonb, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ledger_shard_step_copy(p_def text, p_step text, p_shardid bigint, p_lo integer, p_hi integer, p_shards jsonb, p_here integer) RETURNS text
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $_$
declare
    at_body integer := strpos(p_def, E'\nAS $function$');
    named constant text := 'FUNCTION public.' || p_step || '(';
    history constant text := p_shards ->> 'command_history';
    head text;
    body text;
    t text;
    inserts integer;
    drawn integer;
    guard text;
begin
    -- Each substitution below either applies as the copy needs or raises:
    -- a copy made from a text it does not fit would run without its guard,
    -- under another name, or through Citus for a table it missed.
    if at_body = 0 then
        raise exception 'the definition of % has no body in $function$ quotes', p_step using errcode = 'CL016';
    end if;
    head := left(p_def, at_body);
    body := substr(p_def, at_body + 1);
    -- The name, once in the head (else the copy would replace the step).
    if (length(head) - length(replace(head, named, ''))) / length(named) <> 1 then
        raise exception 'the head of % does not name it once: %', p_step, head using errcode = 'CL016';
    end if;
    head := replace(head, named, 'FUNCTION public.' || p_step || '_s' || p_shardid || '(');
    -- Every table of the group the body names (outside its comments), by
    -- its shard here.
    for t in
        select c.relname::text from pg_dist_partition d join pg_class c on c.oid = d.logicalrelid
        where c.relnamespace = 'public'::regnamespace
          and d.colocationid = (select colocationid from pg_dist_partition where logicalrelid = 'commands'::regclass)
          and not p_shards ? c.relname::text
    loop
        if regexp_replace(body, '--[^\n]*', '', 'g') ~ ('\m' || t || '\M') then
            raise exception '% names %, a table of its shard group that the copies do not name by shard', p_step, t
                using errcode = 'CL016';
        end if;
    end loop;
    for t in select jsonb_object_keys(p_shards) loop
        body := regexp_replace(body, '\m' || t || '\M', p_shards ->> t, 'g');
    end loop;
    -- Every insert into the history's shard gives the id (it has no default).
    body := ledger_history_ids_drawn(body, history);
    inserts := (select count(*) from regexp_matches(body, 'insert\s+into\s+' || history || '\M', 'gi'));
    drawn := (select count(*) from regexp_matches(body, 'insert into ' || history || ' \(id, authority_id,', 'g'));
    if inserts <> drawn then
        raise exception '% inserts into the history % times, % of them in the form whose id the copy draws', p_step, inserts, drawn
            using errcode = 'CL016';
    end if;
    -- The guard opens the body, before its first statement: the authority
    -- hashes into the group, a write through Citus holds the group's shard
    -- metadata lock until commit (no move of the group completes
    -- meanwhile), and the placement is still here.
    guard := format($guard$
        -- A copy of the step for the shards of commands %1$s (0039):
        -- the authority hashes into them, a write through Citus holds
        -- the group's shard metadata lock until commit (no move of the
        -- group completes meanwhile), and the placement is still here.
        if worker_hash(p_authority) not between %2$s and %3$s then
            raise exception 'authority %% is not in shard %1$s', p_authority using errcode = 'CL015';
        end if;
        delete from command_in_flight f
        where f.authority_id = p_authority and f.id = '00000000-0000-0000-0000-000000000000'::uuid;
        if not exists (select 1 from pg_dist_placement p where p.shardid = %1$s and p.groupid = %4$s) then
            raise exception 'shard %1$s has left this node' using errcode = 'CL015';
        end if;
$guard$, p_shardid, p_lo, p_hi, p_here);
    if body !~ E'\n\\s*begin\n' then
        raise exception 'the body of % has no line ''begin'' to open the guard after', p_step using errcode = 'CL016';
    end if;
    body := regexp_replace(body, E'\n(\\s*)begin\n', E'\n\\1begin\n' || guard);
    return head || body;
end;
$_$;

--
-- Name: FUNCTION ledger_shard_step_copy(p_def text, p_step text, p_shardid bigint, p_lo integer, p_hi integer, p_shards jsonb, p_here integer); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ledger_shard_step_copy(p_def text, p_step text, p_shardid bigint, p_lo integer, p_hi integer, p_shards jsonb, p_here integer) IS 'On a node of a Citus cluster: the definition of the copy of engine step p_step (whose definition is p_def) that names the shards p_shards of the group of commands shard p_shardid (hash range p_lo..p_hi) on the node of group p_here, with its guard (0039). Raises (CL016) when a substitution does not fit the text. ledger_make_shard_steps_here() runs what it returns; a copy is current when its definition is what this returns today.';

--
-- Name: ledger_shard_steps_current(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ledger_shard_steps_current() RETURNS boolean
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $_$
begin
    -- Both copies of every group here, each what its step makes today, and
    -- no copy of a group elsewhere.
    return not exists (
               select 1 from ledger_shard_groups_here() g
               where not ledger_shard_step_copies_current(g.shardid))
       and not exists (
               select 1 from pg_proc p
               where p.pronamespace = 'public'::regnamespace
                 and p.proname ~ '^ledger_(claim_start_authority|record_outcomes)_s[0-9]+$'
                 and substring(p.proname from '_s([0-9]+)$')::bigint
                     not in (select g.shardid from ledger_shard_groups_here() g));
end;
$_$;

--
-- Name: FUNCTION ledger_shard_steps_current(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ledger_shard_steps_current() IS 'On a node of a Citus cluster: whether it holds both copies of the engine steps for every shard group here, each what ledger_shard_step_copy() makes of its step today, and none for a group elsewhere (0039); `command-ledger migrate` makes them again when a node says no.';

--
-- Name: ledger_start_prepared(text, text, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ledger_start_prepared(p_authority text, p_holder text, p_limit integer) RETURNS SETOF public.commands
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
begin
    -- Citus gives a worker's copy of a function EXECUTE for PUBLIC
    -- whatever the coordinator's allows, and a call there runs as its
    -- owner: only a custodian's session may go on.
    if not pg_has_role(session_user, 'ledger_custodian', 'member') then
        raise exception 'permission denied: only ledger_custodian starts prepared commands'
            using errcode = '42501';
    end if;
    return query
    with lease as materialized (
        -- Shared lock: a takeover of the lease waits until this commits.
        -- The clock is read once, here (Citus allows only immutable
        -- functions inside CASE).
        select a.id, a.generation, now() as at from authorities a
        where a.id = p_authority and a.lease_holder = p_holder and a.lease_expires_at > now()
        for share
    ),
    picked as (
        -- From the in-flight table, which holds the authority's prepared
        -- and started rows; skipping any another transaction holds (a
        -- cancel, or a start of the same row).
        select c.id
        from lease l
        join command_in_flight f on f.authority_id = l.id
        join commands c on c.authority_id = f.authority_id and c.id = f.id
        where f.authority_id = p_authority and c.authority_id = p_authority
          and c.state = 'prepared' and c.authority_generation = l.generation
        order by c.id
        limit p_limit
        for update of c skip locked
    )
    update commands c
    set state = case when c.deadline_at <= l.at then 'expired' else 'effect_started' end,
        error = case when c.deadline_at <= l.at then '{"reason": "deadline_passed"}'::jsonb end
    from picked p, lease l
    where c.authority_id = p_authority and c.id = p.id
      and c.state = 'prepared' and c.authority_generation = l.generation
    returning c.*;
end
$$;

--
-- Name: FUNCTION ledger_start_prepared(p_authority text, p_holder text, p_limit integer); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ledger_start_prepared(p_authority text, p_holder text, p_limit integer) IS 'Custodian step: up to p_limit prepared commands of p_authority bound to the generation p_holder leases (adopted, or left by another writer) moved to effect_started, or to expired when their deadline passed. Returns the rows as they now are. Fenced by the lease row held for share; no effect starts before it commits.';

--
-- Name: ledger_state_terminal(text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ledger_state_terminal(state text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ select state in ('applied', 'failed', 'ambiguous', 'cancelled', 'expired') $$;

--
-- Name: FUNCTION ledger_state_terminal(state text); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ledger_state_terminal(state text) IS 'Whether a state is terminal: command_states.terminal, compiled from the frozen table by migration 0013.';

--
-- Name: ledger_transition_allowed(text, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ledger_transition_allowed(from_state text, to_state text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ select (from_state, to_state) in (('effect_started', 'ambiguous'), ('effect_started', 'applied'), ('effect_started', 'failed'), ('pending', 'cancelled'), ('pending', 'expired'), ('pending', 'prepared'), ('prepared', 'cancelled'), ('prepared', 'effect_started'), ('prepared', 'expired')) $$;

--
-- Name: FUNCTION ledger_transition_allowed(from_state text, to_state text); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ledger_transition_allowed(from_state text, to_state text) IS 'Whether a state change is in command_transitions, compiled from the frozen table by migration 0013.';

--
-- Name: ledger_utc(timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ledger_utc(t timestamp with time zone) RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
    select to_char(t at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
$$;

--
-- Name: FUNCTION ledger_utc(t timestamp with time zone); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ledger_utc(t timestamp with time zone) IS 'A timestamp in the canonical texts of the history chain: UTC, microseconds, independent of TimeZone.';

--
-- Name: ledger_uuid_v7(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.ledger_uuid_v7() RETURNS uuid
    LANGUAGE sql
    AS $$
    -- The 48-bit Unix time in milliseconds over the first six bytes of a
    -- random (v4) UUID; setting bits 52 and 53 turns its version 4 into 7.
    select encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
                                          placing substring(int8send(floor(extract(epoch from clock_timestamp()) * 1000)::bigint)
                                                            from 3)
                                          from 1 for 6),
                                  52, 1),
                          53, 1),
                  'hex')::uuid
$$;

--
-- Name: FUNCTION ledger_uuid_v7(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.ledger_uuid_v7() IS 'A new UUID version 7 (RFC 9562): milliseconds since the Unix epoch, then random bits; ids made later sort later.';

--
-- Name: principals_own_fleet(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.principals_own_fleet() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
begin
    if new.fleet_id is null then
        insert into fleets (id, name) values (new.id, new.name) on conflict (name) do nothing;
        new.fleet_id := (select id from fleets where name = new.name);
    end if;
    return new;
end;
$$;

--
-- Name: FUNCTION principals_own_fleet(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.principals_own_fleet() IS 'Before insert on principals: a principal given no fleet gets one of its own (id = its id, name = its name).';

--
-- Name: prune_authority(text, interval, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.prune_authority(p_authority text, older_than interval, max_rows integer) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
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
$$;

--
-- Name: FUNCTION prune_authority(p_authority text, older_than interval, max_rows integer); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.prune_authority(p_authority text, older_than interval, max_rows integer) IS 'prune_commands() for one authority: archives into pruned_commands, then deletes, at most max_rows of its commands that finished more than older_than ago (and that no hold refers to), with their history, the requests coalesced into them and their command_keys rows. Only prune_commands() calls it.';

--
-- Name: prune_commands(interval, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.prune_commands(older_than interval, max_rows integer) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
declare
    a text;
    pruned integer := 0;
begin
    if older_than < interval '1 minute' then
        raise exception 'refusing to prune commands that finished less than a minute ago (older_than %)', older_than
            using errcode = 'CL007';
    end if;
    for a in
        select distinct c.authority_id from commands c
        where c.finished_at < now() - older_than
        order by 1
    loop
        exit when pruned >= max_rows;
        pruned := pruned + prune_authority(a, older_than, max_rows - pruned);
    end loop;
    return pruned;
end;
$$;

--
-- Name: FUNCTION prune_commands(older_than interval, max_rows integer); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.prune_commands(older_than interval, max_rows integer) IS 'Archives into pruned_commands, then deletes, at most max_rows finished commands that finished more than older_than ago (and that no hold refers to), with their history, the requests coalesced into them and their keys'' command_keys rows; one authority at a time (prune_authority).';

--
-- Name: refuse_archive_change(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.refuse_archive_change() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
begin
    raise exception 'pruned_commands is append-only'
        using errcode = 'CL003';
end;
$$;

--
-- Name: refuse_authority_removal(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.refuse_authority_removal() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
begin
    raise exception 'authorities are kept: removing one would let its generations be issued again'
        using errcode = 'CL005';
end;
$$;

--
-- Name: FUNCTION refuse_authority_removal(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.refuse_authority_removal() IS 'Refuses delete and truncate on authorities: a generation, once issued, is never issued again.';

--
-- Name: refuse_coalesced_change(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.refuse_coalesced_change() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
begin
    raise exception 'coalesced_requests is append-only'
        using errcode = 'CL003';
end;
$$;

--
-- Name: FUNCTION refuse_coalesced_change(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.refuse_coalesced_change() IS 'Refuses update and truncate on coalesced_requests: forgetting an answer would hold a retry that must replay.';

--
-- Name: refuse_commands_truncate(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.refuse_commands_truncate() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
begin
    raise exception 'commands are deleted only by prune_commands(), which archives them first'
        using errcode = 'CL002';
end;
$$;

--
-- Name: FUNCTION refuse_commands_truncate(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.refuse_commands_truncate() IS 'Refuses truncate on commands: a command leaves the ledger only through prune_commands(), archived.';

--
-- Name: refuse_credentials_truncate(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.refuse_credentials_truncate() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
begin
    raise exception '% is kept: revoke tokens instead of truncating', tg_table_name
        using errcode = 'CL011';
end;
$$;

--
-- Name: FUNCTION refuse_credentials_truncate(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.refuse_credentials_truncate() IS 'Refuses truncate on principals, fleets and api_tokens: the history names principals, and a token is revoked, not erased.';

--
-- Name: refuse_direct_work_change(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.refuse_direct_work_change() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
begin
    if pg_trigger_depth() < 2 then
        raise exception '% is written only by the triggers of commands; change the command instead', tg_table_name
            using errcode = 'CL008';
    end if;
    return null;
end;
$$;

--
-- Name: FUNCTION refuse_direct_work_change(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.refuse_direct_work_change() IS 'Refuses a statement on command_queue or command_in_flight that does not come from a trigger of commands.';

--
-- Name: refuse_history_change(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.refuse_history_change() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
begin
    raise exception 'command_history is append-only'
        using errcode = 'CL003';
end;
$$;

--
-- Name: refuse_holds_truncate(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.refuse_holds_truncate() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
begin
    raise exception 'holds are kept: holds cannot be truncated'
        using errcode = 'CL006';
end;
$$;

--
-- Name: FUNCTION refuse_holds_truncate(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.refuse_holds_truncate() IS 'Refuses truncate on holds: like deleting one (holds_guard), it would forget a decision or a request awaiting one.';

--
-- Name: refuse_provider_change(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.refuse_provider_change() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
begin
    if tg_table_name = 'provider_places' then
        raise exception 'provider_places is written by the claims and the records of the custodians (0049): nothing else takes or frees a place'
            using errcode = 'CL017';
    end if;
    raise exception '% is written by the custodian from its catalog ([providers.<name>]) when it starts; change the catalog instead', tg_table_name
        using errcode = 'CL017';
end;
$$;

--
-- Name: FUNCTION refuse_provider_change(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.refuse_provider_change() IS 'Refuses a statement on provider_limits or provider_kinds that does not come from the engine step ledger_set_providers (0048), on authority_provider_kinds that does not come from ledger_regroup_authority, or on provider_places that does not come from ledger_provider_hold or ledger_provider_release (0049), and any truncation of provider_limits, provider_kinds or provider_places.';

--
-- Name: refuse_reference_data_change(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.refuse_reference_data_change() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
begin
    raise exception 'table % is reference data and cannot be changed outside a migration', tg_table_name
        using errcode = 'CL004';
end;
$$;

--
-- Name: refuse_resolution_change(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.refuse_resolution_change() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
begin
    raise exception 'command_resolutions is append-only'
        using errcode = 'CL003';
end;
$$;

--
-- Name: FUNCTION refuse_resolution_change(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.refuse_resolution_change() IS 'Refuses update, delete and truncate on command_resolutions: a recorded resolution is evidence.';

--
-- Name: refuse_webhook_truncate(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.refuse_webhook_truncate() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
begin
    raise exception '% is kept: disable an endpoint instead of truncating', tg_table_name
        using errcode = 'CL014';
end;
$$;

--
-- Name: FUNCTION refuse_webhook_truncate(); Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON FUNCTION public.refuse_webhook_truncate() IS 'Refuses truncate on webhook_endpoints, webhook_events and webhook_attempts (CL014): endpoints are disabled, and what was sent, when, stays on record.';

--
-- Name: _sqlx_migrations; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public._sqlx_migrations (
    version bigint NOT NULL,
    description text NOT NULL,
    installed_on timestamp with time zone DEFAULT now() NOT NULL,
    success boolean NOT NULL,
    checksum bytea NOT NULL,
    execution_time bigint NOT NULL
);

--
-- Name: api_tokens; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.api_tokens (
    id uuid NOT NULL,
    principal_id uuid NOT NULL,
    token_hash bytea NOT NULL,
    prefix text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone,
    revoked_at timestamp with time zone,
    CONSTRAINT api_tokens_hash_is_sha256 CHECK ((octet_length(token_hash) = 32))
);

--
-- Name: TABLE api_tokens; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.api_tokens IS 'Bearer tokens. Only the SHA-256 of a token is stored; the token itself is shown once at creation.';

--
-- Name: COLUMN api_tokens.id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.api_tokens.id IS 'Token identifier.';

--
-- Name: COLUMN api_tokens.principal_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.api_tokens.principal_id IS 'The principal this token authenticates.';

--
-- Name: COLUMN api_tokens.token_hash; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.api_tokens.token_hash IS 'SHA-256 of the full token string.';

--
-- Name: COLUMN api_tokens.prefix; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.api_tokens.prefix IS 'The first characters of the token, to recognise it in listings; not a secret.';

--
-- Name: COLUMN api_tokens.created_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.api_tokens.created_at IS 'When the token was issued.';

--
-- Name: COLUMN api_tokens.expires_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.api_tokens.expires_at IS 'When the token stops being accepted; null for no expiry.';

--
-- Name: COLUMN api_tokens.revoked_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.api_tokens.revoked_at IS 'When the token was revoked; a revoked token is never accepted again.';

--
-- Name: authorities; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.authorities (
    id text NOT NULL,
    generation bigint DEFAULT 0 NOT NULL,
    lease_holder text,
    lease_expires_at timestamp with time zone,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT authorities_generation_non_negative CHECK ((generation >= 0)),
    CONSTRAINT authorities_lease_complete CHECK (((lease_holder IS NULL) = (lease_expires_at IS NULL)))
);

--
-- Name: TABLE authorities; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.authorities IS 'One row per authority (executor) that custodians lease. The generation is a fencing token.';

--
-- Name: COLUMN authorities.id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.authorities.id IS 'Authority name, as named by commands.authority_id.';

--
-- Name: COLUMN authorities.generation; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.authorities.generation IS 'Fencing token: incremented whenever the lease changes hands or is retaken after expiry; never decreases (authorities_guard) and never reissued (rows are never deleted: authorities_kept).';

--
-- Name: COLUMN authorities.lease_holder; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.authorities.lease_holder IS 'Identity of the custodian holding the lease; null when free.';

--
-- Name: COLUMN authorities.lease_expires_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.authorities.lease_expires_at IS 'When the current lease lapses unless renewed.';

--
-- Name: COLUMN authorities.updated_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.authorities.updated_at IS 'Last change to the row.';

--
-- Name: authority_provider_kinds; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.authority_provider_kinds (
    authority_id text NOT NULL,
    kind text NOT NULL,
    provider text NOT NULL
);

--
-- Name: TABLE authority_provider_kinds; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.authority_provider_kinds IS 'On Citus: which provider group each kind belongs to at one authority, on the authority''s own shard, so that a new command''s queue row takes its group there (commands_record_insert_row). Written only by the engine step ledger_regroup_authority, for the authorities of a custodian whose catalog names the group, when it starts. Empty on one node (provider_kinds serves).';

--
-- Name: COLUMN authority_provider_kinds.authority_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.authority_provider_kinds.authority_id IS 'The authority (commands.authority_id).';

--
-- Name: COLUMN authority_provider_kinds.kind; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.authority_provider_kinds.kind IS 'A kind of the custodian''s catalog.';

--
-- Name: COLUMN authority_provider_kinds.provider; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.authority_provider_kinds.provider IS 'The group (provider_limits.name) its commands are claimed under at this authority.';

--
-- Name: coalesced_requests; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.coalesced_requests (
    authority_id text NOT NULL,
    scope uuid NOT NULL,
    request_digest bytea NOT NULL,
    command_id uuid NOT NULL,
    run_id text,
    answered_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT coalesced_requests_digest_is_sha256 CHECK ((octet_length(request_digest) = 32))
);

--
-- Name: TABLE coalesced_requests; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.coalesced_requests IS 'Requests answered with another request''s command under the intent guard (coalesced, or replayed within the window): a retry of the same request gets that command again, never a hold. Append-only; rows leave with their command when it is pruned.';

--
-- Name: COLUMN coalesced_requests.authority_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.coalesced_requests.authority_id IS 'Authority of the request (and of the command); first key column, so the table partitions like commands by authority.';

--
-- Name: COLUMN coalesced_requests.scope; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.coalesced_requests.scope IS 'The dedup space of the request (as commands.scope).';

--
-- Name: COLUMN coalesced_requests.request_digest; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.coalesced_requests.request_digest IS 'Request digest (with run id) of the coalesced request; differs from the command''s own.';

--
-- Name: COLUMN coalesced_requests.command_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.coalesced_requests.command_id IS 'The command the request was answered with.';

--
-- Name: COLUMN coalesced_requests.run_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.coalesced_requests.run_id IS 'Run id of the coalesced request, for operators.';

--
-- Name: COLUMN coalesced_requests.answered_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.coalesced_requests.answered_at IS 'When the request was first answered with the command.';

--
-- Name: command_queue; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.command_queue (
    authority_id text NOT NULL,
    id uuid NOT NULL,
    rank bigint NOT NULL,
    ready_at timestamp with time zone,
    deadline_at timestamp with time zone,
    provider text
)
WITH (autovacuum_vacuum_scale_factor='0', autovacuum_vacuum_threshold='5000', autovacuum_vacuum_insert_scale_factor='0', autovacuum_vacuum_insert_threshold='5000');

--
-- Name: TABLE command_queue; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.command_queue IS 'Pending commands nobody has claimed yet, per authority, oldest first (ids are time-ordered). Written by the commands triggers: a row is added with its command and removed when the command leaves pending. The claim reads it with FOR UPDATE SKIP LOCKED.';

--
-- Name: COLUMN command_queue.authority_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_queue.authority_id IS 'The authority whose custodian may claim the command.';

--
-- Name: COLUMN command_queue.id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_queue.id IS 'The pending command (commands.id).';

--
-- Name: COLUMN command_queue.rank; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_queue.rank IS 'ledger_claim_rank of the command: the claim takes an authority''s lowest ranks first (ties: oldest id).';

--
-- Name: COLUMN command_queue.ready_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_queue.ready_at IS 'The command''s not_before (null: claimable now); the claim skips rows whose time is ahead.';

--
-- Name: COLUMN command_queue.deadline_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_queue.deadline_at IS 'The command''s deadline_at (null: none), for recovery''s look-up of overdue pending commands (0038).';

--
-- Name: COLUMN command_queue.provider; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_queue.provider IS 'The group whose limits the command is claimed under (provider_kinds, when it was queued or when a custodian''s catalog last changed its kind''s group); null: none.';

--
-- Name: command_backlog_by_authority; Type: VIEW; Schema: public; Owner: -
--

CREATE VIEW public.command_backlog_by_authority AS
 SELECT a.id AS authority_id,
    count(q.id) AS pending,
    count(q.id) FILTER (WHERE ((q.ready_at IS NULL) OR (q.ready_at <= now()))) AS ready,
    COALESCE(max((now() - GREATEST(c.created_at, q.ready_at))) FILTER (WHERE ((q.ready_at IS NULL) OR (q.ready_at <= now()))), '00:00:00'::interval) AS oldest_ready_wait
   FROM (public.authorities a
     LEFT JOIN (public.command_queue q
     JOIN public.commands c ON (((c.authority_id = q.authority_id) AND (c.id = q.id)))) ON ((q.authority_id = a.id)))
  GROUP BY a.id;

--
-- Name: VIEW command_backlog_by_authority; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON VIEW public.command_backlog_by_authority IS 'Per authority: its pending commands (read from command_queue), how many of them are ready (not scheduled for later), and how long the oldest ready one has waited since it became ready (0 when none): the backlog an alert watches, one row per authority.';

--
-- Name: command_states; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.command_states (
    state text NOT NULL,
    "position" smallint NOT NULL,
    terminal boolean NOT NULL,
    description text NOT NULL
);

--
-- Name: TABLE command_states; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.command_states IS 'Every state a command can be in. Mirrors the Rust enum domain::State; a test keeps them identical.';

--
-- Name: COLUMN command_states.state; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_states.state IS 'State name, as stored in commands.state.';

--
-- Name: COLUMN command_states."position"; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_states."position" IS 'Order of the state along the life of a command, for listings.';

--
-- Name: COLUMN command_states.terminal; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_states.terminal IS 'True when no transition leaves this state; the row is then immutable.';

--
-- Name: COLUMN command_states.description; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_states.description IS 'What the state means, for operators reading the schema.';

--
-- Name: command_counts_by_state; Type: VIEW; Schema: public; Owner: -
--

CREATE VIEW public.command_counts_by_state AS
 SELECT s.state,
    s.terminal,
    count(c.id) AS commands
   FROM (public.command_states s
     LEFT JOIN public.commands c ON ((c.state = s.state)))
  GROUP BY s.state, s.terminal, s."position"
  ORDER BY s."position";

--
-- Name: VIEW command_counts_by_state; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON VIEW public.command_counts_by_state IS 'How many commands are in each state (every state listed, zero included).';

--
-- Name: command_history; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.command_history (
    id bigint NOT NULL,
    command_id uuid NOT NULL,
    from_state text,
    to_state text NOT NULL,
    at timestamp with time zone DEFAULT now() NOT NULL,
    actor text NOT NULL,
    authority_generation bigint,
    reason text,
    row_digest bytea,
    prev_hash bytea,
    hash bytea,
    authority_id text NOT NULL,
    seq integer NOT NULL,
    through text,
    CONSTRAINT command_history_hash_is_sha256 CHECK (((octet_length(hash) = 32) AND ((prev_hash IS NULL) OR (octet_length(prev_hash) = 32)) AND ((row_digest IS NULL) OR (octet_length(row_digest) = 32)))),
    CONSTRAINT command_history_states_known CHECK (((from_state = ANY (ARRAY['pending'::text, 'prepared'::text, 'effect_started'::text, 'applied'::text, 'failed'::text, 'ambiguous'::text, 'cancelled'::text, 'expired'::text])) AND (to_state = ANY (ARRAY['pending'::text, 'prepared'::text, 'effect_started'::text, 'applied'::text, 'failed'::text, 'ambiguous'::text, 'cancelled'::text, 'expired'::text])))),
    CONSTRAINT command_history_through_prepared CHECK (((through IS NULL) OR ((from_state = 'pending'::text) AND (through = 'prepared'::text) AND (to_state = 'effect_started'::text))))
);

--
-- Name: TABLE command_history; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.command_history IS 'Append-only audit of every state change (and every adoption of a prepared row by a newer generation), written by trigger (so SQL typed by hand is audited too), each entry hash-chained to the previous entry of its command (`command-ledger verify` recomputes the chains). Updates and deletes are refused.';

--
-- Name: COLUMN command_history.id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_history.id IS 'Order of the entries.';

--
-- Name: COLUMN command_history.command_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_history.command_id IS 'The command that changed.';

--
-- Name: COLUMN command_history.from_state; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_history.from_state IS 'State before the change; null for the creation of the command.';

--
-- Name: COLUMN command_history.to_state; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_history.to_state IS 'State after the change.';

--
-- Name: COLUMN command_history.at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_history.at IS 'Transaction time of the change.';

--
-- Name: COLUMN command_history.actor; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_history.actor IS 'Who made the change: the setting command_ledger.actor of the transaction, else sql:<database user>.';

--
-- Name: COLUMN command_history.authority_generation; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_history.authority_generation IS 'The command''s authority generation after the change.';

--
-- Name: COLUMN command_history.reason; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_history.reason IS 'Why, from the setting command_ledger.reason of the transaction; may be null.';

--
-- Name: COLUMN command_history.row_digest; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_history.row_digest IS 'SHA-256 of the canonical text of the command row as this change left it (ledger_row_digest); null only for entries written before migration 0012 that were not their command''s last.';

--
-- Name: COLUMN command_history.prev_hash; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_history.prev_hash IS 'hash of the previous entry of the same command; null for the entry that created it.';

--
-- Name: COLUMN command_history.hash; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_history.hash IS 'SHA-256 of the canonical text of this entry, prev_hash included (ledger_entry_hash): the chain verify recomputes.';

--
-- Name: COLUMN command_history.authority_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_history.authority_id IS 'The authority of the command (commands.authority_id), copied by the commands triggers: the column the ledger is distributed by, so an entry lives on its command''s shard.';

--
-- Name: COLUMN command_history.seq; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_history.seq IS 'The entry''s place in its command''s chain: 1 for the creation, the previous entry''s plus one after. Entries are read in this order, never by id: on Citus each node draws ids from a range of its own, and a shard moved onto another node goes on with that node''s (0037).';

--
-- Name: COLUMN command_history.through; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_history.through IS 'The state the command passed through within this entry, or null. Only the engine''s claim sets it: one entry for pending -> prepared -> effect_started, both transitions in one transaction at one instant, hashed as entry-v2 (ledger_entry_hash_v2). Readers that list transitions (the API''s history, verify) take such an entry as its two transitions.';

--
-- Name: CONSTRAINT command_history_hash_is_sha256 ON command_history; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON CONSTRAINT command_history_hash_is_sha256 ON public.command_history IS 'The chain''s hashes and the row digest are SHA-256 values.';

--
-- Name: CONSTRAINT command_history_states_known ON command_history; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON CONSTRAINT command_history_states_known ON public.command_history IS 'The states of command_states (frozen reference data), without a lock on it per entry.';

--
-- Name: command_history_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.command_history ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.command_history_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: command_in_flight; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.command_in_flight (
    authority_id text NOT NULL,
    id uuid NOT NULL
)
WITH (autovacuum_vacuum_scale_factor='0', autovacuum_vacuum_threshold='5000', autovacuum_vacuum_insert_scale_factor='0', autovacuum_vacuum_insert_threshold='5000');

--
-- Name: TABLE command_in_flight; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.command_in_flight IS 'Claimed commands that are not terminal yet (prepared or effect_started), per authority. Written by the commands triggers: a row is added when a command leaves pending for prepared and removed when it becomes terminal. Recovery finds every effect_started command here.';

--
-- Name: COLUMN command_in_flight.authority_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_in_flight.authority_id IS 'The authority the command is bound to.';

--
-- Name: COLUMN command_in_flight.id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_in_flight.id IS 'The claimed command (commands.id).';

--
-- Name: command_keys; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.command_keys (
    scope uuid NOT NULL,
    idempotency_key text NOT NULL,
    authority_id text NOT NULL,
    command_id uuid NOT NULL
);

--
-- Name: TABLE command_keys; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.command_keys IS 'On Citus: which command each (scope, idempotency key) names, distributed by scope, written in the submission''s transaction; keeps a key to one command across authorities. Empty on one node (commands_scope_key_unique does it).';

--
-- Name: COLUMN command_keys.scope; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_keys.scope IS 'The dedup scope the key belongs to (commands.scope).';

--
-- Name: COLUMN command_keys.idempotency_key; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_keys.idempotency_key IS 'The key (commands.idempotency_key).';

--
-- Name: COLUMN command_keys.authority_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_keys.authority_id IS 'The authority of the command it names: where that command''s row is.';

--
-- Name: COLUMN command_keys.command_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_keys.command_id IS 'The command it names (commands.id).';

--
-- Name: command_oldest_in_flight; Type: VIEW; Schema: public; Owner: -
--

CREATE VIEW public.command_oldest_in_flight AS
 SELECT s.state,
    count(c.id) AS commands,
    min(c.created_at) AS oldest_created_at,
    (now() - min(c.created_at)) AS oldest_age,
    (now() - min(c.updated_at)) AS longest_in_state
   FROM (public.command_states s
     LEFT JOIN ( SELECT c_1.state,
            c_1.id,
            c_1.created_at,
            c_1.updated_at
           FROM (( SELECT command_queue.id
                   FROM public.command_queue
                UNION ALL
                 SELECT command_in_flight.id
                   FROM public.command_in_flight) live
             JOIN public.commands c_1 ON ((c_1.id = live.id)))) c ON ((c.state = s.state)))
  WHERE (NOT s.terminal)
  GROUP BY s.state, s."position"
  ORDER BY s."position";

--
-- Name: VIEW command_oldest_in_flight; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON VIEW public.command_oldest_in_flight IS 'Per non-terminal state: how many commands, the age of the oldest, and the longest time one has sat in that state (read from command_queue and command_in_flight).';

--
-- Name: command_resolutions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.command_resolutions (
    command_id uuid NOT NULL,
    outcome text NOT NULL,
    evidence text NOT NULL,
    reference text,
    source text NOT NULL,
    actor text NOT NULL,
    at timestamp with time zone DEFAULT now() NOT NULL,
    anchor_hash bytea NOT NULL,
    hash bytea NOT NULL,
    authority_id text NOT NULL,
    CONSTRAINT command_resolutions_evidence_length CHECK (((char_length(evidence) >= 1) AND (char_length(evidence) <= 2000))),
    CONSTRAINT command_resolutions_outcome CHECK ((outcome = ANY (ARRAY['applied'::text, 'not_applied'::text]))),
    CONSTRAINT command_resolutions_reference_length CHECK (((char_length(reference) >= 1) AND (char_length(reference) <= 200))),
    CONSTRAINT command_resolutions_source CHECK ((source = ANY (ARRAY['operator'::text, 'probe'::text])))
);

--
-- Name: TABLE command_resolutions; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.command_resolutions IS 'What became of ambiguous commands, learned after they ended: at most one resolution per command, append-only, chained by hash to the command''s ambiguous history entry. The command stays ambiguous; rows outlive pruning (no foreign key) as the record of what was decided.';

--
-- Name: COLUMN command_resolutions.command_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_resolutions.command_id IS 'The ambiguous command (commands.id).';

--
-- Name: COLUMN command_resolutions.outcome; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_resolutions.outcome IS 'applied: the effect ran; not_applied: it never ran.';

--
-- Name: COLUMN command_resolutions.evidence; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_resolutions.evidence IS 'What says so, in words (for example "provider says applied").';

--
-- Name: COLUMN command_resolutions.reference; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_resolutions.reference IS 'The provider''s reference for the effect, when there is one (for example rf_123).';

--
-- Name: COLUMN command_resolutions.source; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_resolutions.source IS 'operator: recorded by hand; probe: the kind''s reconcile probe answered, asked by an operator.';

--
-- Name: COLUMN command_resolutions.actor; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_resolutions.actor IS 'Who recorded it (operator:<name>).';

--
-- Name: COLUMN command_resolutions.at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_resolutions.at IS 'When it was recorded.';

--
-- Name: COLUMN command_resolutions.anchor_hash; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_resolutions.anchor_hash IS 'hash of the command''s last history entry (its ambiguous entry) when the resolution was recorded.';

--
-- Name: COLUMN command_resolutions.hash; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_resolutions.hash IS 'SHA-256 of the resolution''s canonical text, anchor included (ledger_resolution_hash): verify recomputes it.';

--
-- Name: COLUMN command_resolutions.authority_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_resolutions.authority_id IS 'The authority of the command (commands.authority_id): the column the ledger is distributed by, so a resolution lives on its command''s shard. Given by the writer; the admit trigger checks the command is of it.';

--
-- Name: command_transitions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.command_transitions (
    from_state text NOT NULL,
    to_state text NOT NULL
);

--
-- Name: TABLE command_transitions; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.command_transitions IS 'The allowed state changes. The commands trigger refuses any other; mirrors domain::TRANSITIONS.';

--
-- Name: COLUMN command_transitions.from_state; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_transitions.from_state IS 'State the command leaves.';

--
-- Name: COLUMN command_transitions.to_state; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.command_transitions.to_state IS 'State the command enters.';

--
-- Name: fleets; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.fleets (
    id uuid NOT NULL,
    name text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT fleets_name_format CHECK ((name ~ '^[A-Za-z0-9][A-Za-z0-9_.@:-]{0,127}$'::text))
);

--
-- Name: TABLE fleets; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.fleets IS 'Groups of principals (agents, workers of one tenant) that share one dedup space for the kinds whose dedup_scope is fleet: two members racing one intent make one command.';

--
-- Name: COLUMN fleets.id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.fleets.id IS 'Stable identifier; commands.scope holds it for commands of fleet-scoped kinds. A principal alone in its fleet has a fleet id equal to its own id.';

--
-- Name: COLUMN fleets.name; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.fleets.name IS 'Name given with token create --fleet (by default the first principal''s name), unique.';

--
-- Name: COLUMN fleets.created_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.fleets.created_at IS 'When the fleet was created.';

--
-- Name: holds; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.holds (
    id uuid NOT NULL,
    scope uuid NOT NULL,
    kind text NOT NULL,
    authority_id text NOT NULL,
    pinned_generation bigint,
    run_id text,
    args jsonb NOT NULL,
    canonical jsonb NOT NULL,
    canonical_rules text[] DEFAULT '{}'::text[] NOT NULL,
    request_digest bytea NOT NULL,
    intent_digest bytea NOT NULL,
    digest_version smallint NOT NULL,
    deadline_at timestamp with time zone,
    resembles uuid NOT NULL,
    state text DEFAULT 'open'::text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    decided_at timestamp with time zone,
    decided_by text,
    decision_reason text,
    command_id uuid,
    not_before timestamp with time zone,
    priority smallint DEFAULT 0 NOT NULL,
    confirmed_applied uuid,
    CONSTRAINT holds_confirmation_only_when_released CHECK (((confirmed_applied IS NULL) OR (state = 'released'::text))),
    CONSTRAINT holds_decided_iff_not_open CHECK (((state = 'open'::text) = ((decided_at IS NULL) AND (decided_by IS NULL)))),
    CONSTRAINT holds_digests_are_sha256 CHECK (((octet_length(request_digest) = 32) AND (octet_length(intent_digest) = 32))),
    CONSTRAINT holds_priority_in_range CHECK (((priority >= '-100'::integer) AND (priority <= 100))),
    CONSTRAINT holds_released_has_command CHECK (((state = 'released'::text) = (command_id IS NOT NULL))),
    CONSTRAINT holds_state_known CHECK ((state = ANY (ARRAY['open'::text, 'released'::text, 'rejected'::text])))
);

--
-- Name: TABLE holds; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.holds IS 'Near-duplicate intents (the same intent from another run, after the coalescing window) held for a human. Released: a command was recorded for it. Rejected: nothing was.';

--
-- Name: COLUMN holds.id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.holds.id IS 'Hold identifier (UUID v7).';

--
-- Name: COLUMN holds.scope; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.holds.scope IS 'The dedup space of the held request (a fleet id or a principal id, as commands.scope).';

--
-- Name: COLUMN holds.kind; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.holds.kind IS 'Kind of the held request.';

--
-- Name: COLUMN holds.authority_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.holds.authority_id IS 'Authority of the held request.';

--
-- Name: COLUMN holds.pinned_generation; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.holds.pinned_generation IS 'Pinned authority generation of the held request, if any.';

--
-- Name: COLUMN holds.run_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.holds.run_id IS 'Run id of the held request.';

--
-- Name: COLUMN holds.args; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.holds.args IS 'Arguments as received.';

--
-- Name: COLUMN holds.canonical; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.holds.canonical IS 'Canonical form of the request.';

--
-- Name: COLUMN holds.canonical_rules; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.holds.canonical_rules IS 'Canonicalizer rules that fired.';

--
-- Name: COLUMN holds.request_digest; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.holds.request_digest IS 'Request digest (with run id); a retry of the same held request finds this hold.';

--
-- Name: COLUMN holds.intent_digest; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.holds.intent_digest IS 'Intent digest, equal to that of the command it resembles.';

--
-- Name: COLUMN holds.digest_version; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.holds.digest_version IS 'Canonicalizer version of the digests.';

--
-- Name: COLUMN holds.deadline_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.holds.deadline_at IS 'Deadline of the held request, carried to the command on release.';

--
-- Name: COLUMN holds.resembles; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.holds.resembles IS 'The earlier command with the same intent.';

--
-- Name: COLUMN holds.state; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.holds.state IS 'open | released | rejected.';

--
-- Name: COLUMN holds.created_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.holds.created_at IS 'When the request was held.';

--
-- Name: COLUMN holds.decided_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.holds.decided_at IS 'When an operator decided.';

--
-- Name: COLUMN holds.decided_by; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.holds.decided_by IS 'Which operator decided (operator:<name>).';

--
-- Name: COLUMN holds.decision_reason; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.holds.decision_reason IS 'Why, as the operator said.';

--
-- Name: COLUMN holds.command_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.holds.command_id IS 'The command recorded when the hold was released.';

--
-- Name: COLUMN holds.not_before; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.holds.not_before IS 'not_before of the held request, carried to the command on release.';

--
-- Name: COLUMN holds.priority; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.holds.priority IS 'Priority of the held request, carried to the command on release.';

--
-- Name: COLUMN holds.confirmed_applied; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.holds.confirmed_applied IS 'For a released hold whose intent had been applied after the hold opened: the applied command the operator confirmed running the intent again despite (the release is refused unless it names it). Null otherwise.';

--
-- Name: principals; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.principals (
    id uuid NOT NULL,
    name text NOT NULL,
    role text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    fleet_id uuid NOT NULL,
    CONSTRAINT principals_name_format CHECK ((name ~ '^[A-Za-z0-9][A-Za-z0-9_.@:-]{0,127}$'::text)),
    CONSTRAINT principals_role_known CHECK ((role = ANY (ARRAY['device'::text, 'operator'::text])))
);

--
-- Name: TABLE principals; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.principals IS 'Authenticated callers. A device submits and sees only its own commands; an operator sees all.';

--
-- Name: COLUMN principals.id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.principals.id IS 'Stable identifier; commands.scope holds it for commands of principal-scoped kinds.';

--
-- Name: COLUMN principals.name; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.principals.name IS 'Human name given at token creation, unique.';

--
-- Name: COLUMN principals.role; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.principals.role IS 'device | operator.';

--
-- Name: COLUMN principals.created_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.principals.created_at IS 'When the principal was first created.';

--
-- Name: COLUMN principals.fleet_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.principals.fleet_id IS 'The fleet the principal belongs to (fixed at creation): its dedup space for fleet-scoped kinds, and whose commands it may read.';

--
-- Name: holds_awaiting_decision; Type: VIEW; Schema: public; Owner: -
--

CREATE VIEW public.holds_awaiting_decision AS
 SELECT h.id,
    h.kind,
    h.authority_id,
    h.run_id,
    h.created_at,
    (now() - h.created_at) AS waiting_for,
    h.resembles,
    c.state AS resembles_state,
    COALESCE(p.name, f.name) AS principal
   FROM (((public.holds h
     LEFT JOIN public.principals p ON ((p.id = h.scope)))
     LEFT JOIN public.fleets f ON ((f.id = h.scope)))
     JOIN public.commands c ON (((c.authority_id = h.authority_id) AND (c.id = h.resembles))))
  WHERE (h.state = 'open'::text)
  ORDER BY h.created_at;

--
-- Name: VIEW holds_awaiting_decision; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON VIEW public.holds_awaiting_decision IS 'Open holds, oldest first, with the command each resembles and the principal (or fleet) whose scope holds them.';

--
-- Name: ledger_counts; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ledger_counts (
    minute timestamp with time zone NOT NULL,
    counter text NOT NULL,
    source text NOT NULL,
    n bigint NOT NULL,
    CONSTRAINT ledger_counts_minute_is_whole CHECK ((minute = date_trunc('minute'::text, minute)))
);

--
-- Name: TABLE ledger_counts; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.ledger_counts IS 'Cluster-wide counters in per-minute rollups: one row per minute, counter and source, added to, summed on read (GET /v1/state, /metrics, the console''s charts). See migration 0017 for the sources.';

--
-- Name: COLUMN ledger_counts.minute; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ledger_counts.minute IS 'Start of the minute counted (of the day, for rows folded past a day).';

--
-- Name: COLUMN ledger_counts.counter; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ledger_counts.counter IS 'What is counted: requests, new, replay, coalesced, held, conflict, refused (API requests); executions, applied, failed, ambiguous (history entries); latency_le_<ms> / latency_le_inf (applied commands by submit-to-applied latency, a histogram).';

--
-- Name: COLUMN ledger_counts.source; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ledger_counts.source IS 'Who wrote the row: api:<process id>, pg:<backend pid>, or empty once folded by ledger_counts_compact().';

--
-- Name: COLUMN ledger_counts.n; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ledger_counts.n IS 'How many in that minute from that source.';

--
-- Name: ledger_counts_by_authority; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ledger_counts_by_authority (
    authority_id text NOT NULL,
    minute timestamp with time zone NOT NULL,
    counter text NOT NULL,
    source text NOT NULL,
    n bigint NOT NULL
);

--
-- Name: TABLE ledger_counts_by_authority; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.ledger_counts_by_authority IS 'On Citus: the executions, outcomes and submit-to-applied latencies of ledger_counts, counted by the shards'' history trigger (commands_record_change_row) per authority, beside its commands; folded into ledger_counts by ledger_counts_compact() once the minute is over, and read together with it. Empty on one node, where command_history''s statement-level trigger writes ledger_counts itself.';

--
-- Name: COLUMN ledger_counts_by_authority.authority_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ledger_counts_by_authority.authority_id IS 'The authority whose commands were counted.';

--
-- Name: COLUMN ledger_counts_by_authority.minute; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ledger_counts_by_authority.minute IS 'Start of the minute counted.';

--
-- Name: COLUMN ledger_counts_by_authority.counter; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ledger_counts_by_authority.counter IS 'As ledger_counts.counter: executions, applied, failed, ambiguous, latency_le_<ms>.';

--
-- Name: COLUMN ledger_counts_by_authority.source; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ledger_counts_by_authority.source IS 'pg:<backend pid> of the worker''s backend: one writer per row.';

--
-- Name: COLUMN ledger_counts_by_authority.n; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ledger_counts_by_authority.n IS 'How many in that minute from that source.';

--
-- Name: ledger_distribution; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ledger_distribution (
    "position" integer NOT NULL,
    table_name text NOT NULL,
    method text NOT NULL,
    distribution_column text,
    colocate_with text,
    rekey text[] DEFAULT '{}'::text[] NOT NULL,
    CONSTRAINT ledger_distribution_check CHECK (((method = 'distributed'::text) = (distribution_column IS NOT NULL))),
    CONSTRAINT ledger_distribution_method_check CHECK ((method = ANY (ARRAY['reference'::text, 'distributed'::text])))
);

--
-- Name: TABLE ledger_distribution; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.ledger_distribution IS 'How ledger_distribute() lays each table out on a Citus cluster, in position order: reference tables are copied to every node; distributed tables are split by distribution_column and co-located with colocate_with. A later migration adding a table adds its row here.';

--
-- Name: COLUMN ledger_distribution."position"; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ledger_distribution."position" IS 'Order of distribution: a reference table before the tables that refer to it, a table before those co-located with it.';

--
-- Name: COLUMN ledger_distribution.table_name; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ledger_distribution.table_name IS 'The table.';

--
-- Name: COLUMN ledger_distribution.method; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ledger_distribution.method IS 'reference (a full copy on every node) or distributed (hash-partitioned).';

--
-- Name: COLUMN ledger_distribution.distribution_column; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ledger_distribution.distribution_column IS 'For a distributed table: the column its rows are placed by (an authority).';

--
-- Name: COLUMN ledger_distribution.colocate_with; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ledger_distribution.colocate_with IS 'For a distributed table: the table whose shards its shards sit beside (null: a co-location group of its own).';

--
-- Name: COLUMN ledger_distribution.rekey; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ledger_distribution.rekey IS 'Statements run on the coordinator just before the table is distributed: a unique key or a foreign key on Citus must contain the distribution column.';

--
-- Name: ledger_function_sources; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ledger_function_sources (
    name text NOT NULL,
    file text NOT NULL,
    checksum bytea NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: TABLE ledger_function_sources; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.ledger_function_sources IS 'The files of migrations/functions applied to this database: for each function or view, the file (by layout: <name>.sql, or <name>.citus.sql on Citus) whose text it now holds, that text''s SHA-256, and when `command-ledger migrate` applied it. Written by migrate only.';

--
-- Name: COLUMN ledger_function_sources.name; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ledger_function_sources.name IS 'The function''s or view''s name (the file''s name without its layout and extension).';

--
-- Name: COLUMN ledger_function_sources.file; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ledger_function_sources.file IS 'The file applied, migrations/functions/<file>.';

--
-- Name: COLUMN ledger_function_sources.checksum; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ledger_function_sources.checksum IS 'SHA-256 of the file''s text as applied: a file whose text differs is applied again.';

--
-- Name: COLUMN ledger_function_sources.applied_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.ledger_function_sources.applied_at IS 'When the file was last applied.';

--
-- Name: provider_kinds; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.provider_kinds (
    kind text NOT NULL,
    provider text NOT NULL
);

--
-- Name: TABLE provider_kinds; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.provider_kinds IS 'Which kinds belong to which provider group (the catalog''s provider = "<name>"): written with provider_limits by ledger_set_providers. A new command''s queue row takes its kind''s group from here.';

--
-- Name: COLUMN provider_kinds.kind; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.provider_kinds.kind IS 'A kind of the catalog.';

--
-- Name: COLUMN provider_kinds.provider; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.provider_kinds.provider IS 'The group whose limits its commands are claimed under (provider_limits.name).';

--
-- Name: provider_limits; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.provider_limits (
    name text NOT NULL,
    max_in_flight integer,
    rate double precision,
    burst integer DEFAULT 1 NOT NULL,
    tokens double precision DEFAULT 0 NOT NULL,
    refilled_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT provider_limits_burst_check CHECK ((burst >= 1)),
    CONSTRAINT provider_limits_check CHECK (((max_in_flight IS NOT NULL) OR (rate IS NOT NULL))),
    CONSTRAINT provider_limits_max_in_flight_check CHECK (((max_in_flight IS NULL) OR (max_in_flight >= 1))),
    CONSTRAINT provider_limits_rate_check CHECK (((rate IS NULL) OR (rate > (0)::double precision)))
);

--
-- Name: TABLE provider_limits; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.provider_limits IS 'Limits per provider (a group of kinds in the catalog, [providers.<name>]): written by the custodian from its catalog when it starts (ledger_set_providers), read and drawn from by the claim under a row lock, so that every custodian process shares one bucket. Refuses any other writer (CL017).';

--
-- Name: COLUMN provider_limits.name; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.provider_limits.name IS 'The group''s name in the catalog ([providers.<name>]).';

--
-- Name: COLUMN provider_limits.max_in_flight; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.provider_limits.max_in_flight IS 'The most commands of the group claimed and not terminal at once, across every custodian (null: no such limit).';

--
-- Name: COLUMN provider_limits.rate; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.provider_limits.rate IS 'Tokens added per second: the claim starts at most this many of the group''s commands a second, over time (null: no rate limit).';

--
-- Name: COLUMN provider_limits.burst; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.provider_limits.burst IS 'The most tokens the bucket holds: how many may start at once after a quiet spell.';

--
-- Name: COLUMN provider_limits.tokens; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.provider_limits.tokens IS 'Tokens left at refilled_at (each command the claim starts takes one); the claim adds rate per second since, up to burst.';

--
-- Name: COLUMN provider_limits.refilled_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.provider_limits.refilled_at IS 'When tokens was last computed.';

--
-- Name: COLUMN provider_limits.updated_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.provider_limits.updated_at IS 'When a custodian last wrote the limits from its catalog.';

--
-- Name: provider_places; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.provider_places (
    authority_id text NOT NULL,
    command_id uuid NOT NULL,
    provider text NOT NULL,
    held_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: TABLE provider_places; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.provider_places IS 'On Citus: one row per command of a provider group claimed and not known to be terminal, on the coordinator beside provider_limits: the group''s commands in flight, which its max_in_flight bounds. Written only by the engine steps ledger_provider_hold (in the claim''s transaction) and ledger_provider_release (after the outcome is recorded, or when a custodian finds the command no longer in flight). Empty on one node (command_in_flight is counted there).';

--
-- Name: COLUMN provider_places.authority_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.provider_places.authority_id IS 'The command''s authority.';

--
-- Name: COLUMN provider_places.command_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.provider_places.command_id IS 'The command (commands.id) that holds the place.';

--
-- Name: COLUMN provider_places.provider; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.provider_places.provider IS 'The group whose place it holds (provider_limits.name); ledger_set_providers frees the places of a group it removes.';

--
-- Name: COLUMN provider_places.held_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.provider_places.held_at IS 'When the place was taken.';

--
-- Name: pruned_commands; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.pruned_commands (
    id uuid NOT NULL,
    scope uuid NOT NULL,
    idempotency_key text NOT NULL,
    kind text NOT NULL,
    authority_id text NOT NULL,
    state text NOT NULL,
    created_at timestamp with time zone NOT NULL,
    finished_at timestamp with time zone NOT NULL,
    pruned_at timestamp with time zone DEFAULT now() NOT NULL,
    pruned_by text NOT NULL,
    record jsonb NOT NULL
);

--
-- Name: TABLE pruned_commands; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.pruned_commands IS 'What pruning kept of each command it removed: the identifying columns, and the row with its full history as one JSON document.';

--
-- Name: COLUMN pruned_commands.pruned_by; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.pruned_commands.pruned_by IS 'The actor that pruned it (setting command_ledger.actor, else sql:<user>).';

--
-- Name: COLUMN pruned_commands.record; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.pruned_commands.record IS '{"command": the commands row, "history": [its command_history rows, oldest first], "coalesced": [the coalesced_requests rows answered with it]} as they were when pruned.';

--
-- Name: webhook_attempts; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.webhook_attempts (
    authority_id text NOT NULL,
    event_id uuid NOT NULL,
    n integer NOT NULL,
    at timestamp with time zone NOT NULL,
    status integer,
    error text,
    duration_ms integer NOT NULL,
    CONSTRAINT webhook_attempts_duration_non_negative CHECK ((duration_ms >= 0)),
    CONSTRAINT webhook_attempts_n_positive CHECK ((n > 0)),
    CONSTRAINT webhook_attempts_status_or_error CHECK (((status IS NOT NULL) OR (error IS NOT NULL)))
);

--
-- Name: TABLE webhook_attempts; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.webhook_attempts IS 'Each finished attempt to send a webhook_events row: when, what the receiver answered (or why nothing came back), how long it took. Written by the deliverer that made it.';

--
-- Name: COLUMN webhook_attempts.authority_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.webhook_attempts.authority_id IS 'The event''s authority (the distribution column, as webhook_events).';

--
-- Name: COLUMN webhook_attempts.event_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.webhook_attempts.event_id IS 'The event sent.';

--
-- Name: COLUMN webhook_attempts.n; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.webhook_attempts.n IS 'Which attempt (1 for the first), as sent in Ledger-Attempt.';

--
-- Name: COLUMN webhook_attempts.at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.webhook_attempts.at IS 'When the request was sent.';

--
-- Name: COLUMN webhook_attempts.status; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.webhook_attempts.status IS 'The HTTP status the receiver answered (null: no answer).';

--
-- Name: COLUMN webhook_attempts.error; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.webhook_attempts.error IS 'Why it failed: the address refused by the URL rule, the connection, the timeout, or the non-2xx status.';

--
-- Name: COLUMN webhook_attempts.duration_ms; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.webhook_attempts.duration_ms IS 'From the connection to the answer (or the failure), in milliseconds.';

--
-- Name: webhook_endpoints; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.webhook_endpoints (
    id uuid NOT NULL,
    scope uuid NOT NULL,
    url text NOT NULL,
    kinds text[],
    states text[],
    secret text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    created_by text NOT NULL,
    disabled_at timestamp with time zone,
    CONSTRAINT webhook_endpoints_kinds_not_empty CHECK ((cardinality(kinds) > 0)),
    CONSTRAINT webhook_endpoints_secret_length CHECK ((char_length(secret) >= 32)),
    CONSTRAINT webhook_endpoints_states_terminal CHECK (((cardinality(states) > 0) AND (states <@ ARRAY['applied'::text, 'failed'::text, 'ambiguous'::text, 'cancelled'::text, 'expired'::text]))),
    CONSTRAINT webhook_endpoints_url_length CHECK (((char_length(url) >= 1) AND (char_length(url) <= 2048)))
);

--
-- Name: TABLE webhook_endpoints; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.webhook_endpoints IS 'Where a principal or a fleet wants the outcomes of its commands pushed: each command of the scope that reaches a terminal state (of the kinds and states asked for) becomes a webhook_events row. Registered with POST /v1/webhooks; disabled, never deleted, with DELETE /v1/webhooks/{id}.';

--
-- Name: COLUMN webhook_endpoints.id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.webhook_endpoints.id IS 'Stable identifier (UUIDv7, made by the API).';

--
-- Name: COLUMN webhook_endpoints.scope; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.webhook_endpoints.scope IS 'The dedup space whose commands it receives, matched against commands.scope: the registering principal''s fleet id (commands of kinds with dedup_scope = fleet, any member''s) or its own id (kinds with dedup_scope = principal), as the registration asked; admission decides which scope a command is recorded in.';

--
-- Name: COLUMN webhook_endpoints.url; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.webhook_endpoints.url IS 'Where events are POSTed: http or https, no user name or password; not an address of the ledger''s own network (loopback, private, link-local, unique-local, and their IPv4-mapped forms) unless the operator allows private targets. Checked at registration and again when each connection is made.';

--
-- Name: COLUMN webhook_endpoints.kinds; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.webhook_endpoints.kinds IS 'Only commands of these kinds (null: every kind).';

--
-- Name: COLUMN webhook_endpoints.states; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.webhook_endpoints.states IS 'Only these terminal states (null: all five).';

--
-- Name: COLUMN webhook_endpoints.secret; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.webhook_endpoints.secret IS 'The HMAC-SHA256 key events are signed with (Ledger-Signature), kept so that deliverers can sign; shown to the registrant once, never listed, and not readable by ledger_inspector.';

--
-- Name: COLUMN webhook_endpoints.created_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.webhook_endpoints.created_at IS 'When it was registered.';

--
-- Name: COLUMN webhook_endpoints.created_by; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.webhook_endpoints.created_by IS 'Who registered it, as history names actors (device:<name>, operator:<name>).';

--
-- Name: COLUMN webhook_endpoints.disabled_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.webhook_endpoints.disabled_at IS 'When it was disabled: no new events from then on; events already written are still delivered.';

--
-- Name: webhook_events; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.webhook_events (
    id uuid NOT NULL,
    authority_id text NOT NULL,
    endpoint_id uuid NOT NULL,
    command_id uuid NOT NULL,
    payload jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone,
    next_attempt_at timestamp with time zone DEFAULT now(),
    attempts integer DEFAULT 0 NOT NULL,
    delivered_at timestamp with time zone,
    state text DEFAULT 'pending'::text NOT NULL,
    last_error text,
    CONSTRAINT webhook_events_attempts_non_negative CHECK ((attempts >= 0)),
    CONSTRAINT webhook_events_delivered_iff_delivered_at CHECK (((state = 'delivered'::text) = (delivered_at IS NOT NULL))),
    CONSTRAINT webhook_events_pending_iff_scheduled CHECK (((state = 'pending'::text) = (next_attempt_at IS NOT NULL))),
    CONSTRAINT webhook_events_state_known CHECK ((state = ANY (ARRAY['pending'::text, 'delivered'::text, 'expired'::text])))
);

--
-- Name: TABLE webhook_events; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TABLE public.webhook_events IS 'An outcome to push: written by the commands_webhook_events trigger in the transaction that made the command terminal, one per matching endpoint; sent by a deliverer (serve, custodian) until a 2xx (delivered) or its expiry (expired). An operator may redeliver one (POST /v1/webhooks/events/{id}/redeliver). Not a foreign key to commands: a command may be pruned before its events are.';

--
-- Name: COLUMN webhook_events.id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.webhook_events.id IS 'UUIDv7; sent as Ledger-Event-Id and as the body''s event_id: the key a receiver drops duplicates by, since delivery is at least once.';

--
-- Name: COLUMN webhook_events.authority_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.webhook_events.authority_id IS 'The command''s authority: the column the ledger is distributed by, so an event lives on its command''s shard.';

--
-- Name: COLUMN webhook_events.endpoint_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.webhook_events.endpoint_id IS 'The webhook_endpoints row it is sent to (no foreign key: on Citus the events are distributed and the endpoints a reference table; endpoints are never deleted).';

--
-- Name: COLUMN webhook_events.command_id; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.webhook_events.command_id IS 'The command whose outcome it reports.';

--
-- Name: COLUMN webhook_events.payload; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.webhook_events.payload IS 'What is sent, beside event_id and created_at: command_id, key, kind, authority, state, result, error, finished_at, and history_hash (hex), the hash of the command''s terminal command_history entry, which `verify` recomputes.';

--
-- Name: COLUMN webhook_events.created_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.webhook_events.created_at IS 'When the command became terminal (the outcome''s transaction).';

--
-- Name: COLUMN webhook_events.expires_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.webhook_events.expires_at IS 'After this no attempt is made and the event is expired: set by the first deliverer that takes it up (the time of that first attempt plus its --webhook-expiry), and again by a redelivery. Null until then.';

--
-- Name: COLUMN webhook_events.next_attempt_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.webhook_events.next_attempt_at IS 'While pending: when it is due. A deliverer that takes it up moves this past its request''s timeout (a lease: if the deliverer dies mid-send, another sends it again after that). Null once delivered or expired.';

--
-- Name: COLUMN webhook_events.attempts; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.webhook_events.attempts IS 'How many attempts were started (webhook_attempts holds each one that finished).';

--
-- Name: COLUMN webhook_events.delivered_at; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.webhook_events.delivered_at IS 'When a receiver answered 2xx.';

--
-- Name: COLUMN webhook_events.state; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.webhook_events.state IS 'pending (to send), delivered (a 2xx came back) or expired (no more attempts).';

--
-- Name: COLUMN webhook_events.last_error; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON COLUMN public.webhook_events.last_error IS 'What the last failed attempt, or the expiry, said.';

--
-- Name: _sqlx_migrations _sqlx_migrations_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public._sqlx_migrations
    ADD CONSTRAINT _sqlx_migrations_pkey PRIMARY KEY (version);

--
-- Name: api_tokens api_tokens_hash_unique; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.api_tokens
    ADD CONSTRAINT api_tokens_hash_unique UNIQUE (token_hash);

--
-- Name: api_tokens api_tokens_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.api_tokens
    ADD CONSTRAINT api_tokens_pkey PRIMARY KEY (id);

--
-- Name: authorities authorities_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.authorities
    ADD CONSTRAINT authorities_pkey PRIMARY KEY (id);

--
-- Name: authority_provider_kinds authority_provider_kinds_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.authority_provider_kinds
    ADD CONSTRAINT authority_provider_kinds_pkey PRIMARY KEY (authority_id, kind);

--
-- Name: coalesced_requests coalesced_requests_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.coalesced_requests
    ADD CONSTRAINT coalesced_requests_pkey PRIMARY KEY (authority_id, scope, request_digest, command_id);

--
-- Name: command_history command_history_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.command_history
    ADD CONSTRAINT command_history_pkey PRIMARY KEY (id);

--
-- Name: command_in_flight command_in_flight_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.command_in_flight
    ADD CONSTRAINT command_in_flight_pkey PRIMARY KEY (authority_id, id);

--
-- Name: command_keys command_keys_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.command_keys
    ADD CONSTRAINT command_keys_pkey PRIMARY KEY (scope, idempotency_key);

--
-- Name: command_queue command_queue_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.command_queue
    ADD CONSTRAINT command_queue_pkey PRIMARY KEY (authority_id, id);

--
-- Name: command_resolutions command_resolutions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.command_resolutions
    ADD CONSTRAINT command_resolutions_pkey PRIMARY KEY (command_id);

--
-- Name: command_states command_states_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.command_states
    ADD CONSTRAINT command_states_pkey PRIMARY KEY (state);

--
-- Name: command_states command_states_position_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.command_states
    ADD CONSTRAINT command_states_position_key UNIQUE ("position");

--
-- Name: command_transitions command_transitions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.command_transitions
    ADD CONSTRAINT command_transitions_pkey PRIMARY KEY (from_state, to_state);

--
-- Name: commands commands_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.commands
    ADD CONSTRAINT commands_pkey PRIMARY KEY (id);

--
-- Name: commands commands_scope_key_unique; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.commands
    ADD CONSTRAINT commands_scope_key_unique UNIQUE (scope, idempotency_key);

--
-- Name: fleets fleets_name_unique; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.fleets
    ADD CONSTRAINT fleets_name_unique UNIQUE (name);

--
-- Name: fleets fleets_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.fleets
    ADD CONSTRAINT fleets_pkey PRIMARY KEY (id);

--
-- Name: holds holds_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.holds
    ADD CONSTRAINT holds_pkey PRIMARY KEY (id);

--
-- Name: ledger_counts_by_authority ledger_counts_by_authority_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ledger_counts_by_authority
    ADD CONSTRAINT ledger_counts_by_authority_pkey PRIMARY KEY (authority_id, minute, counter, source);

--
-- Name: ledger_counts ledger_counts_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ledger_counts
    ADD CONSTRAINT ledger_counts_pkey PRIMARY KEY (minute, counter, source);

--
-- Name: ledger_distribution ledger_distribution_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ledger_distribution
    ADD CONSTRAINT ledger_distribution_pkey PRIMARY KEY ("position");

--
-- Name: ledger_distribution ledger_distribution_table_name_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ledger_distribution
    ADD CONSTRAINT ledger_distribution_table_name_key UNIQUE (table_name);

--
-- Name: ledger_function_sources ledger_function_sources_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ledger_function_sources
    ADD CONSTRAINT ledger_function_sources_pkey PRIMARY KEY (name);

--
-- Name: principals principals_name_unique; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.principals
    ADD CONSTRAINT principals_name_unique UNIQUE (name);

--
-- Name: principals principals_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.principals
    ADD CONSTRAINT principals_pkey PRIMARY KEY (id);

--
-- Name: provider_kinds provider_kinds_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.provider_kinds
    ADD CONSTRAINT provider_kinds_pkey PRIMARY KEY (kind);

--
-- Name: provider_limits provider_limits_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.provider_limits
    ADD CONSTRAINT provider_limits_pkey PRIMARY KEY (name);

--
-- Name: provider_places provider_places_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.provider_places
    ADD CONSTRAINT provider_places_pkey PRIMARY KEY (authority_id, command_id);

--
-- Name: pruned_commands pruned_commands_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.pruned_commands
    ADD CONSTRAINT pruned_commands_pkey PRIMARY KEY (id);

--
-- Name: webhook_attempts webhook_attempts_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.webhook_attempts
    ADD CONSTRAINT webhook_attempts_pkey PRIMARY KEY (event_id, n);

--
-- Name: webhook_endpoints webhook_endpoints_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.webhook_endpoints
    ADD CONSTRAINT webhook_endpoints_pkey PRIMARY KEY (id);

--
-- Name: webhook_events webhook_events_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.webhook_events
    ADD CONSTRAINT webhook_events_pkey PRIMARY KEY (id);

--
-- Name: coalesced_requests_command_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX coalesced_requests_command_idx ON public.coalesced_requests USING btree (command_id);

--
-- Name: command_history_ambiguous_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX command_history_ambiguous_idx ON public.command_history USING btree (at) WHERE (to_state = 'ambiguous'::text);

--
-- Name: INDEX command_history_ambiguous_idx; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON INDEX public.command_history_ambiguous_idx IS 'Commands that ended ambiguous, by when: the operator''s list and the ambiguous count stay cheap as the ledger grows.';

--
-- Name: command_history_chain_order; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX command_history_chain_order ON public.command_history USING btree (command_id, seq, authority_id);

--
-- Name: INDEX command_history_chain_order; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON INDEX public.command_history_chain_order IS 'A command''s entries in chain order, read backwards for the last one; one entry a place, so a chain cannot fork (0037). authority_id is in it because a unique index on Citus holds the distribution column.';

--
-- Name: command_queue_claim_order_unlimited; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX command_queue_claim_order_unlimited ON public.command_queue USING btree (authority_id, rank, id) WHERE (provider IS NULL);

--
-- Name: INDEX command_queue_claim_order_unlimited; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON INDEX public.command_queue_claim_order_unlimited IS 'The claim order of the queued commands under no provider limit, per authority.';

--
-- Name: command_queue_overdue; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX command_queue_overdue ON public.command_queue USING btree (deadline_at, id) WHERE (deadline_at IS NOT NULL);

--
-- Name: INDEX command_queue_overdue; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON INDEX public.command_queue_overdue IS 'Pending commands with a deadline, soonest first: recovery reads the overdue ones from its start (0038).';

--
-- Name: command_queue_provider_order; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX command_queue_provider_order ON public.command_queue USING btree (authority_id, provider, rank, id) WHERE (provider IS NOT NULL);

--
-- Name: INDEX command_queue_provider_order; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON INDEX public.command_queue_provider_order IS 'The claim order of the queued commands of each provider group, per authority: the claim reads as many of a group''s head as it has room for.';

--
-- Name: command_queue_scheduled; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX command_queue_scheduled ON public.command_queue USING btree (authority_id, ready_at) WHERE (ready_at IS NOT NULL);

--
-- Name: commands_attempts; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX commands_attempts ON public.commands USING btree (authority_id, retry_of, attempt) WHERE (attempt > 1);

--
-- Name: INDEX commands_attempts; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON INDEX public.commands_attempts IS 'The attempts after the first of each chain, by the chain''s first command (retry_of) and attempt, one each: a chain''s last attempt, and an attempt''s successor, in one probe.';

--
-- Name: commands_authority_id_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX commands_authority_id_idx ON public.commands USING btree (authority_id, id DESC);

--
-- Name: INDEX commands_authority_id_idx; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON INDEX public.commands_authority_id_idx IS 'Search by authority, newest first (immutable columns: transitions stay HOT).';

--
-- Name: commands_key_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX commands_key_idx ON public.commands USING btree (idempotency_key);

--
-- Name: INDEX commands_key_idx; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON INDEX public.commands_key_idx IS 'Search by idempotency key across scopes, for operators (immutable column: transitions stay HOT).';

--
-- Name: commands_kind_id_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX commands_kind_id_idx ON public.commands USING btree (kind, id DESC);

--
-- Name: INDEX commands_kind_id_idx; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON INDEX public.commands_kind_id_idx IS 'Search by kind, newest first (immutable columns: transitions stay HOT).';

--
-- Name: commands_scope_id_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX commands_scope_id_idx ON public.commands USING btree (scope, id DESC);

--
-- Name: commands_scope_intent_epoch_unique; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX commands_scope_intent_epoch_unique ON public.commands USING btree (scope, intent_digest, intent_epoch) WHERE (intent_epoch IS NOT NULL);

--
-- Name: commands_scope_intent_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX commands_scope_intent_idx ON public.commands USING btree (scope, intent_digest, created_at DESC) WHERE (intent_digest IS NOT NULL);

--
-- Name: holds_open_request_unique; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX holds_open_request_unique ON public.holds USING btree (scope, request_digest) WHERE (state = 'open'::text);

--
-- Name: holds_state_created_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX holds_state_created_idx ON public.holds USING btree (state, created_at DESC);

--
-- Name: ledger_counts_counter_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ledger_counts_counter_idx ON public.ledger_counts USING btree (counter, minute);

--
-- Name: principals_fleet_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX principals_fleet_idx ON public.principals USING btree (fleet_id);

--
-- Name: provider_places_by_provider; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX provider_places_by_provider ON public.provider_places USING btree (provider);

--
-- Name: pruned_commands_scope_key_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX pruned_commands_scope_key_idx ON public.pruned_commands USING btree (scope, idempotency_key);

--
-- Name: webhook_endpoints_by_scope; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX webhook_endpoints_by_scope ON public.webhook_endpoints USING btree (scope) WHERE (disabled_at IS NULL);

--
-- Name: INDEX webhook_endpoints_by_scope; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON INDEX public.webhook_endpoints_by_scope IS 'The one probe the outcome trigger makes for a terminal command: live endpoints of its scope.';

--
-- Name: webhook_events_by_endpoint; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX webhook_events_by_endpoint ON public.webhook_events USING btree (endpoint_id, id);

--
-- Name: INDEX webhook_events_by_endpoint; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON INDEX public.webhook_events_by_endpoint IS 'An endpoint''s events, newest last (ids are time-ordered).';

--
-- Name: webhook_events_due; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX webhook_events_due ON public.webhook_events USING btree (next_attempt_at) WHERE (state = 'pending'::text);

--
-- Name: INDEX webhook_events_due; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON INDEX public.webhook_events_due IS 'Pending events by when they are due: what deliverers claim.';

--
-- Name: api_tokens api_tokens_kept; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER api_tokens_kept BEFORE TRUNCATE ON public.api_tokens FOR EACH STATEMENT EXECUTE FUNCTION public.refuse_credentials_truncate();

--
-- Name: authorities authorities_guard; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER authorities_guard BEFORE UPDATE ON public.authorities FOR EACH ROW EXECUTE FUNCTION public.authorities_guard();

--
-- Name: authorities authorities_kept; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER authorities_kept BEFORE DELETE OR TRUNCATE ON public.authorities FOR EACH STATEMENT EXECUTE FUNCTION public.refuse_authority_removal();

--
-- Name: TRIGGER authorities_kept ON authorities; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TRIGGER authorities_kept ON public.authorities IS 'A deleted authority would restart at generation 1 and reissue generations already used.';

--
-- Name: authority_provider_kinds authority_provider_kinds_follow_the_catalog; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER authority_provider_kinds_follow_the_catalog BEFORE INSERT OR DELETE OR UPDATE ON public.authority_provider_kinds FOR EACH STATEMENT WHEN ((CURRENT_USER <> 'ledger_engine'::name)) EXECUTE FUNCTION public.refuse_provider_change();

--
-- Name: authority_provider_kinds authority_provider_kinds_kept; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER authority_provider_kinds_kept BEFORE TRUNCATE ON public.authority_provider_kinds FOR EACH STATEMENT EXECUTE FUNCTION public.refuse_provider_change();

--
-- Name: coalesced_requests coalesced_requests_append_only; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER coalesced_requests_append_only BEFORE UPDATE OR TRUNCATE ON public.coalesced_requests FOR EACH STATEMENT EXECUTE FUNCTION public.refuse_coalesced_change();

--
-- Name: coalesced_requests coalesced_requests_leave_with_their_command; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER coalesced_requests_leave_with_their_command BEFORE DELETE ON public.coalesced_requests FOR EACH ROW EXECUTE FUNCTION public.coalesced_requests_delete_guard();

--
-- Name: command_history command_history_append_only; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER command_history_append_only BEFORE UPDATE OR TRUNCATE ON public.command_history FOR EACH STATEMENT EXECUTE FUNCTION public.refuse_history_change();

--
-- Name: command_history command_history_counts; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER command_history_counts AFTER INSERT ON public.command_history REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((CURRENT_USER <> 'ledger_engine'::name)) EXECUTE FUNCTION public.ledger_count_history();

--
-- Name: command_history command_history_leaves_with_its_command; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER command_history_leaves_with_its_command BEFORE DELETE ON public.command_history FOR EACH ROW EXECUTE FUNCTION public.command_history_delete_guard();

--
-- Name: command_in_flight command_in_flight_follows_commands; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER command_in_flight_follows_commands BEFORE INSERT OR DELETE OR UPDATE OR TRUNCATE ON public.command_in_flight FOR EACH STATEMENT WHEN ((CURRENT_USER <> 'ledger_engine'::name)) EXECUTE FUNCTION public.refuse_direct_work_change();

--
-- Name: command_keys command_keys_never_change; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER command_keys_never_change BEFORE UPDATE ON public.command_keys FOR EACH ROW EXECUTE FUNCTION public.command_keys_refuse_change();

--
-- Name: command_keys command_keys_no_truncate; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER command_keys_no_truncate BEFORE TRUNCATE ON public.command_keys FOR EACH STATEMENT EXECUTE FUNCTION public.command_keys_refuse_change();

--
-- Name: command_queue command_queue_follows_commands; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER command_queue_follows_commands BEFORE INSERT OR DELETE OR UPDATE OR TRUNCATE ON public.command_queue FOR EACH STATEMENT WHEN ((CURRENT_USER <> 'ledger_engine'::name)) EXECUTE FUNCTION public.refuse_direct_work_change();

--
-- Name: command_resolutions command_resolutions_admit; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER command_resolutions_admit BEFORE INSERT ON public.command_resolutions FOR EACH ROW EXECUTE FUNCTION public.command_resolutions_admit();

--
-- Name: command_resolutions command_resolutions_append_only; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER command_resolutions_append_only BEFORE DELETE OR UPDATE ON public.command_resolutions FOR EACH ROW EXECUTE FUNCTION public.refuse_resolution_change();

--
-- Name: command_resolutions command_resolutions_no_truncate; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER command_resolutions_no_truncate BEFORE TRUNCATE ON public.command_resolutions FOR EACH STATEMENT EXECUTE FUNCTION public.refuse_resolution_change();

--
-- Name: command_states command_states_frozen; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER command_states_frozen BEFORE INSERT OR DELETE OR UPDATE OR TRUNCATE ON public.command_states FOR EACH STATEMENT EXECUTE FUNCTION public.refuse_reference_data_change();

--
-- Name: command_transitions command_transitions_frozen; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER command_transitions_frozen BEFORE INSERT OR DELETE OR UPDATE OR TRUNCATE ON public.command_transitions FOR EACH STATEMENT EXECUTE FUNCTION public.refuse_reference_data_change();

--
-- Name: commands commands_archived_before_delete; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER commands_archived_before_delete BEFORE DELETE ON public.commands FOR EACH ROW EXECUTE FUNCTION public.commands_guard_delete();

--
-- Name: commands commands_guard; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER commands_guard BEFORE INSERT OR DELETE OR UPDATE ON public.commands FOR EACH ROW WHEN ((CURRENT_USER <> 'ledger_engine'::name)) EXECUTE FUNCTION public.commands_guard();

--
-- Name: commands commands_history_leaves; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER commands_history_leaves AFTER DELETE ON public.commands REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION public.commands_history_leaves();

--
-- Name: commands commands_identity_digest_kept; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER commands_identity_digest_kept BEFORE UPDATE OF identity_digest ON public.commands FOR EACH ROW WHEN (((CURRENT_USER <> 'ledger_engine'::name) AND (new.identity_digest IS DISTINCT FROM old.identity_digest))) EXECUTE FUNCTION public.commands_identity_digest_immutable();

--
-- Name: commands commands_kept; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER commands_kept BEFORE TRUNCATE ON public.commands FOR EACH STATEMENT EXECUTE FUNCTION public.refuse_commands_truncate();

--
-- Name: commands commands_queue_deadline; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER commands_queue_deadline AFTER UPDATE OF deadline_at ON public.commands FOR EACH ROW WHEN (((new.deadline_at IS DISTINCT FROM old.deadline_at) AND (new.state = 'pending'::text))) EXECUTE FUNCTION public.commands_queue_follows_deadline();

--
-- Name: TRIGGER commands_queue_deadline ON commands; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON TRIGGER commands_queue_deadline ON public.commands IS 'Carries a pending command''s changed deadline_at to its queue row (0038).';

--
-- Name: commands commands_record_changes; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER commands_record_changes AFTER UPDATE ON public.commands REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((CURRENT_USER <> 'ledger_engine'::name)) EXECUTE FUNCTION public.commands_record_changes();

--
-- Name: commands commands_record_inserts; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER commands_record_inserts AFTER INSERT ON public.commands REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.commands_record_inserts();

--
-- Name: commands commands_retry_of_immutable; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER commands_retry_of_immutable BEFORE UPDATE OF retry_of ON public.commands FOR EACH ROW WHEN ((new.retry_of IS DISTINCT FROM old.retry_of)) EXECUTE FUNCTION public.commands_retry_of_immutable();

--
-- Name: commands commands_webhook_events; Type: TRIGGER; Schema: public; Owner: -
--

CREATE CONSTRAINT TRIGGER commands_webhook_events AFTER UPDATE OF state ON public.commands DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (((old.state IS DISTINCT FROM new.state) AND (new.state = ANY (ARRAY['applied'::text, 'failed'::text, 'ambiguous'::text, 'cancelled'::text, 'expired'::text])))) EXECUTE FUNCTION public.commands_webhook_events();

--
-- Name: fleets fleets_kept; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER fleets_kept BEFORE TRUNCATE ON public.fleets FOR EACH STATEMENT EXECUTE FUNCTION public.refuse_credentials_truncate();

--
-- Name: holds holds_guard; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER holds_guard BEFORE DELETE OR UPDATE ON public.holds FOR EACH ROW EXECUTE FUNCTION public.holds_guard();

--
-- Name: holds holds_kept; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER holds_kept BEFORE TRUNCATE ON public.holds FOR EACH STATEMENT EXECUTE FUNCTION public.refuse_holds_truncate();

--
-- Name: principals principals_kept; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER principals_kept BEFORE TRUNCATE ON public.principals FOR EACH STATEMENT EXECUTE FUNCTION public.refuse_credentials_truncate();

--
-- Name: principals principals_own_fleet; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER principals_own_fleet BEFORE INSERT ON public.principals FOR EACH ROW EXECUTE FUNCTION public.principals_own_fleet();

--
-- Name: provider_kinds provider_kinds_follow_the_catalog; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER provider_kinds_follow_the_catalog BEFORE INSERT OR DELETE OR UPDATE ON public.provider_kinds FOR EACH STATEMENT WHEN ((CURRENT_USER <> 'ledger_engine'::name)) EXECUTE FUNCTION public.refuse_provider_change();

--
-- Name: provider_kinds provider_kinds_kept; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER provider_kinds_kept BEFORE TRUNCATE ON public.provider_kinds FOR EACH STATEMENT EXECUTE FUNCTION public.refuse_provider_change();

--
-- Name: provider_limits provider_limits_follow_the_catalog; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER provider_limits_follow_the_catalog BEFORE INSERT OR DELETE OR UPDATE ON public.provider_limits FOR EACH STATEMENT WHEN ((CURRENT_USER <> 'ledger_engine'::name)) EXECUTE FUNCTION public.refuse_provider_change();

--
-- Name: provider_limits provider_limits_kept; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER provider_limits_kept BEFORE TRUNCATE ON public.provider_limits FOR EACH STATEMENT EXECUTE FUNCTION public.refuse_provider_change();

--
-- Name: provider_places provider_places_follow_the_claims; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER provider_places_follow_the_claims BEFORE INSERT OR DELETE OR UPDATE ON public.provider_places FOR EACH STATEMENT WHEN ((CURRENT_USER <> 'ledger_engine'::name)) EXECUTE FUNCTION public.refuse_provider_change();

--
-- Name: provider_places provider_places_kept; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER provider_places_kept BEFORE TRUNCATE ON public.provider_places FOR EACH STATEMENT EXECUTE FUNCTION public.refuse_provider_change();

--
-- Name: pruned_commands pruned_commands_append_only; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER pruned_commands_append_only BEFORE DELETE OR UPDATE OR TRUNCATE ON public.pruned_commands FOR EACH STATEMENT EXECUTE FUNCTION public.refuse_archive_change();

--
-- Name: webhook_attempts webhook_attempts_kept; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER webhook_attempts_kept BEFORE TRUNCATE ON public.webhook_attempts FOR EACH STATEMENT EXECUTE FUNCTION public.refuse_webhook_truncate();

--
-- Name: webhook_endpoints webhook_endpoints_kept; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER webhook_endpoints_kept BEFORE TRUNCATE ON public.webhook_endpoints FOR EACH STATEMENT EXECUTE FUNCTION public.refuse_webhook_truncate();

--
-- Name: webhook_events webhook_events_kept; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER webhook_events_kept BEFORE TRUNCATE ON public.webhook_events FOR EACH STATEMENT EXECUTE FUNCTION public.refuse_webhook_truncate();

--
-- Name: api_tokens api_tokens_principal_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.api_tokens
    ADD CONSTRAINT api_tokens_principal_id_fkey FOREIGN KEY (principal_id) REFERENCES public.principals(id);

--
-- Name: coalesced_requests coalesced_requests_command_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.coalesced_requests
    ADD CONSTRAINT coalesced_requests_command_id_fkey FOREIGN KEY (command_id) REFERENCES public.commands(id) ON DELETE CASCADE;

--
-- Name: command_transitions command_transitions_from_state_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.command_transitions
    ADD CONSTRAINT command_transitions_from_state_fkey FOREIGN KEY (from_state) REFERENCES public.command_states(state);

--
-- Name: command_transitions command_transitions_to_state_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.command_transitions
    ADD CONSTRAINT command_transitions_to_state_fkey FOREIGN KEY (to_state) REFERENCES public.command_states(state);

--
-- Name: holds holds_command_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.holds
    ADD CONSTRAINT holds_command_id_fkey FOREIGN KEY (command_id) REFERENCES public.commands(id);

--
-- Name: holds holds_resembles_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.holds
    ADD CONSTRAINT holds_resembles_fkey FOREIGN KEY (resembles) REFERENCES public.commands(id);

--
-- Name: principals principals_fleet_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.principals
    ADD CONSTRAINT principals_fleet_fkey FOREIGN KEY (fleet_id) REFERENCES public.fleets(id);

--
-- Name: provider_kinds provider_kinds_provider_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.provider_kinds
    ADD CONSTRAINT provider_kinds_provider_fkey FOREIGN KEY (provider) REFERENCES public.provider_limits(name);

--
-- Name: provider_places provider_places_provider_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.provider_places
    ADD CONSTRAINT provider_places_provider_fkey FOREIGN KEY (provider) REFERENCES public.provider_limits(name);

--
-- Name: commands; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.commands ENABLE ROW LEVEL SECURITY;

--
-- Name: commands commands_advance; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY commands_advance ON public.commands FOR UPDATE TO ledger_custodian USING (true) WITH CHECK ((state <> 'cancelled'::text));

--
-- Name: POLICY commands_advance ON commands; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON POLICY commands_advance ON public.commands IS 'A custodian moves commands along the state machine (commands_guard) but never cancels one.';

--
-- Name: commands commands_cancel; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY commands_cancel ON public.commands FOR UPDATE TO ledger_api USING ((state = ANY (ARRAY['pending'::text, 'prepared'::text]))) WITH CHECK ((state = 'cancelled'::text));

--
-- Name: POLICY commands_cancel ON commands; Type: COMMENT; Schema: public; Owner: -
--

COMMENT ON POLICY commands_cancel ON public.commands IS 'The API changes a command only to cancel it, from pending or prepared.';

--
-- Name: commands commands_engine; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY commands_engine ON public.commands TO ledger_engine USING (true) WITH CHECK (true);

--
-- Name: commands commands_read; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY commands_read ON public.commands FOR SELECT TO ledger_api, ledger_custodian, ledger_inspector, ledger_retention USING (true);

--
-- Name: commands commands_record; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY commands_record ON public.commands FOR INSERT TO ledger_api WITH CHECK ((state = 'pending'::text));

--
-- Name: SCHEMA public; Type: ACL; Schema: -; Owner: -
--

GRANT ALL ON SCHEMA public TO ledger_owner;
GRANT USAGE ON SCHEMA public TO ledger_api;
GRANT USAGE ON SCHEMA public TO ledger_custodian;
GRANT USAGE ON SCHEMA public TO ledger_inspector;
GRANT USAGE ON SCHEMA public TO ledger_retention;
GRANT ALL ON SCHEMA public TO ledger_engine;

--
-- Name: FUNCTION command_keys_refuse_change(); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.command_keys_refuse_change() FROM PUBLIC;

--
-- Name: TABLE commands; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT ON TABLE public.commands TO ledger_api;
GRANT SELECT,UPDATE ON TABLE public.commands TO ledger_custodian;
GRANT SELECT ON TABLE public.commands TO ledger_inspector;
GRANT SELECT ON TABLE public.commands TO ledger_retention;
GRANT SELECT,INSERT,UPDATE ON TABLE public.commands TO ledger_engine;

--
-- Name: COLUMN commands.state; Type: ACL; Schema: public; Owner: -
--

GRANT UPDATE(state) ON TABLE public.commands TO ledger_api;

--
-- Name: COLUMN commands.error; Type: ACL; Schema: public; Owner: -
--

GRANT UPDATE(error) ON TABLE public.commands TO ledger_api;

--
-- Name: FUNCTION ledger_claim_start(p_authorities text[], p_holder text, p_limit integer); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.ledger_claim_start(p_authorities text[], p_holder text, p_limit integer) FROM PUBLIC;
GRANT ALL ON FUNCTION public.ledger_claim_start(p_authorities text[], p_holder text, p_limit integer) TO ledger_custodian;

--
-- Name: FUNCTION ledger_claim_start_authority(p_authority text, p_holder text, p_limit integer); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.ledger_claim_start_authority(p_authority text, p_holder text, p_limit integer) FROM PUBLIC;
GRANT ALL ON FUNCTION public.ledger_claim_start_authority(p_authority text, p_holder text, p_limit integer) TO ledger_custodian;

--
-- Name: FUNCTION ledger_counts_compact(); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.ledger_counts_compact() FROM PUBLIC;
GRANT ALL ON FUNCTION public.ledger_counts_compact() TO ledger_api;

--
-- Name: FUNCTION ledger_delegate_engine_steps(); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.ledger_delegate_engine_steps() FROM PUBLIC;

--
-- Name: FUNCTION ledger_distribute(); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.ledger_distribute() FROM PUBLIC;

--
-- Name: FUNCTION ledger_history_id(); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.ledger_history_id() FROM PUBLIC;
GRANT ALL ON FUNCTION public.ledger_history_id() TO ledger_engine;

--
-- Name: FUNCTION ledger_history_ids_drawn(p_body text, p_history text); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.ledger_history_ids_drawn(p_body text, p_history text) FROM PUBLIC;

--
-- Name: FUNCTION ledger_make_shard_steps_here(); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.ledger_make_shard_steps_here() FROM PUBLIC;

--
-- Name: FUNCTION ledger_next_attempt(p_authority text, p_id uuid, p_retry_in double precision, p_retry_within double precision); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.ledger_next_attempt(p_authority text, p_id uuid, p_retry_in double precision, p_retry_within double precision) FROM PUBLIC;
GRANT ALL ON FUNCTION public.ledger_next_attempt(p_authority text, p_id uuid, p_retry_in double precision, p_retry_within double precision) TO ledger_custodian;

--
-- Name: FUNCTION ledger_record_outcomes(p_authority text, p_generation bigint, p_outcomes jsonb); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.ledger_record_outcomes(p_authority text, p_generation bigint, p_outcomes jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION public.ledger_record_outcomes(p_authority text, p_generation bigint, p_outcomes jsonb) TO ledger_custodian;

--
-- Name: FUNCTION ledger_remember_coalesced(p_authority_id text, p_scope uuid, p_request_digest bytea, p_command_id uuid, p_run_id text); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.ledger_remember_coalesced(p_authority_id text, p_scope uuid, p_request_digest bytea, p_command_id uuid, p_run_id text) FROM PUBLIC;
GRANT ALL ON FUNCTION public.ledger_remember_coalesced(p_authority_id text, p_scope uuid, p_request_digest bytea, p_command_id uuid, p_run_id text) TO ledger_api;

--
-- Name: FUNCTION ledger_set_providers(p_providers jsonb); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.ledger_set_providers(p_providers jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION public.ledger_set_providers(p_providers jsonb) TO ledger_custodian;

--
-- Name: FUNCTION ledger_shard_groups_here(OUT shardid bigint, OUT lo integer, OUT hi integer, OUT shards jsonb); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.ledger_shard_groups_here(OUT shardid bigint, OUT lo integer, OUT hi integer, OUT shards jsonb) FROM PUBLIC;

--
-- Name: FUNCTION ledger_shard_step_copy(p_def text, p_step text, p_shardid bigint, p_lo integer, p_hi integer, p_shards jsonb, p_here integer); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.ledger_shard_step_copy(p_def text, p_step text, p_shardid bigint, p_lo integer, p_hi integer, p_shards jsonb, p_here integer) FROM PUBLIC;

--
-- Name: FUNCTION prune_authority(p_authority text, older_than interval, max_rows integer); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.prune_authority(p_authority text, older_than interval, max_rows integer) FROM PUBLIC;

--
-- Name: FUNCTION prune_commands(older_than interval, max_rows integer); Type: ACL; Schema: public; Owner: -
--

REVOKE ALL ON FUNCTION public.prune_commands(older_than interval, max_rows integer) FROM PUBLIC;
GRANT ALL ON FUNCTION public.prune_commands(older_than interval, max_rows integer) TO ledger_retention;

--
-- Name: TABLE _sqlx_migrations; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public._sqlx_migrations TO ledger_api;
GRANT SELECT ON TABLE public._sqlx_migrations TO ledger_custodian;
GRANT SELECT ON TABLE public._sqlx_migrations TO ledger_inspector;
GRANT SELECT ON TABLE public._sqlx_migrations TO ledger_retention;

--
-- Name: TABLE api_tokens; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.api_tokens TO ledger_api;

--
-- Name: COLUMN api_tokens.id; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT(id) ON TABLE public.api_tokens TO ledger_inspector;

--
-- Name: COLUMN api_tokens.principal_id; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT(principal_id) ON TABLE public.api_tokens TO ledger_inspector;

--
-- Name: COLUMN api_tokens.prefix; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT(prefix) ON TABLE public.api_tokens TO ledger_inspector;

--
-- Name: COLUMN api_tokens.created_at; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT(created_at) ON TABLE public.api_tokens TO ledger_inspector;

--
-- Name: COLUMN api_tokens.expires_at; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT(expires_at) ON TABLE public.api_tokens TO ledger_inspector;

--
-- Name: COLUMN api_tokens.revoked_at; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT(revoked_at) ON TABLE public.api_tokens TO ledger_inspector;

--
-- Name: TABLE authorities; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.authorities TO ledger_api;
GRANT SELECT,INSERT,UPDATE ON TABLE public.authorities TO ledger_custodian;
GRANT SELECT ON TABLE public.authorities TO ledger_inspector;
GRANT SELECT ON TABLE public.authorities TO ledger_engine;

--
-- Name: COLUMN authorities.lease_holder; Type: ACL; Schema: public; Owner: -
--

GRANT UPDATE(lease_holder) ON TABLE public.authorities TO ledger_engine;

--
-- Name: TABLE authority_provider_kinds; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.authority_provider_kinds TO ledger_api;
GRANT SELECT ON TABLE public.authority_provider_kinds TO ledger_custodian;
GRANT SELECT ON TABLE public.authority_provider_kinds TO ledger_inspector;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.authority_provider_kinds TO ledger_engine;

--
-- Name: TABLE coalesced_requests; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.coalesced_requests TO ledger_api;
GRANT SELECT ON TABLE public.coalesced_requests TO ledger_inspector;

--
-- Name: TABLE command_queue; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.command_queue TO ledger_api;
GRANT SELECT ON TABLE public.command_queue TO ledger_custodian;
GRANT SELECT ON TABLE public.command_queue TO ledger_inspector;
GRANT SELECT,DELETE,UPDATE ON TABLE public.command_queue TO ledger_engine;

--
-- Name: COLUMN command_queue.id; Type: ACL; Schema: public; Owner: -
--

GRANT UPDATE(id) ON TABLE public.command_queue TO ledger_custodian;

--
-- Name: COLUMN command_queue.provider; Type: ACL; Schema: public; Owner: -
--

GRANT UPDATE(provider) ON TABLE public.command_queue TO ledger_engine;

--
-- Name: TABLE command_backlog_by_authority; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.command_backlog_by_authority TO ledger_api;
GRANT SELECT ON TABLE public.command_backlog_by_authority TO ledger_inspector;

--
-- Name: TABLE command_states; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.command_states TO ledger_api;
GRANT SELECT ON TABLE public.command_states TO ledger_custodian;
GRANT SELECT ON TABLE public.command_states TO ledger_inspector;
GRANT SELECT ON TABLE public.command_states TO ledger_retention;

--
-- Name: TABLE command_counts_by_state; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.command_counts_by_state TO ledger_api;
GRANT SELECT ON TABLE public.command_counts_by_state TO ledger_custodian;
GRANT SELECT ON TABLE public.command_counts_by_state TO ledger_inspector;
GRANT SELECT ON TABLE public.command_counts_by_state TO ledger_retention;

--
-- Name: TABLE command_history; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.command_history TO ledger_api;
GRANT SELECT ON TABLE public.command_history TO ledger_custodian;
GRANT SELECT ON TABLE public.command_history TO ledger_inspector;
GRANT SELECT,INSERT ON TABLE public.command_history TO ledger_engine;

--
-- Name: SEQUENCE command_history_id_seq; Type: ACL; Schema: public; Owner: -
--

GRANT USAGE ON SEQUENCE public.command_history_id_seq TO ledger_engine;

--
-- Name: TABLE command_in_flight; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.command_in_flight TO ledger_api;
GRANT SELECT ON TABLE public.command_in_flight TO ledger_custodian;
GRANT SELECT ON TABLE public.command_in_flight TO ledger_inspector;
GRANT SELECT,INSERT,DELETE ON TABLE public.command_in_flight TO ledger_engine;

--
-- Name: COLUMN command_in_flight.id; Type: ACL; Schema: public; Owner: -
--

GRANT UPDATE(id) ON TABLE public.command_in_flight TO ledger_custodian;

--
-- Name: TABLE command_keys; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT ON TABLE public.command_keys TO ledger_api;
GRANT SELECT ON TABLE public.command_keys TO ledger_custodian;
GRANT SELECT ON TABLE public.command_keys TO ledger_inspector;
GRANT SELECT ON TABLE public.command_keys TO ledger_retention;

--
-- Name: TABLE command_oldest_in_flight; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.command_oldest_in_flight TO ledger_api;
GRANT SELECT ON TABLE public.command_oldest_in_flight TO ledger_custodian;
GRANT SELECT ON TABLE public.command_oldest_in_flight TO ledger_inspector;
GRANT SELECT ON TABLE public.command_oldest_in_flight TO ledger_retention;

--
-- Name: TABLE command_resolutions; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT ON TABLE public.command_resolutions TO ledger_api;
GRANT SELECT ON TABLE public.command_resolutions TO ledger_custodian;
GRANT SELECT ON TABLE public.command_resolutions TO ledger_inspector;
GRANT SELECT ON TABLE public.command_resolutions TO ledger_retention;

--
-- Name: TABLE command_transitions; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.command_transitions TO ledger_api;
GRANT SELECT ON TABLE public.command_transitions TO ledger_custodian;
GRANT SELECT ON TABLE public.command_transitions TO ledger_inspector;
GRANT SELECT ON TABLE public.command_transitions TO ledger_retention;

--
-- Name: TABLE fleets; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.fleets TO ledger_api;
GRANT SELECT ON TABLE public.fleets TO ledger_inspector;

--
-- Name: TABLE holds; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT,UPDATE ON TABLE public.holds TO ledger_api;
GRANT SELECT ON TABLE public.holds TO ledger_custodian;
GRANT SELECT ON TABLE public.holds TO ledger_inspector;

--
-- Name: TABLE principals; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.principals TO ledger_api;
GRANT SELECT ON TABLE public.principals TO ledger_inspector;

--
-- Name: TABLE holds_awaiting_decision; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.holds_awaiting_decision TO ledger_api;
GRANT SELECT ON TABLE public.holds_awaiting_decision TO ledger_custodian;
GRANT SELECT ON TABLE public.holds_awaiting_decision TO ledger_inspector;
GRANT SELECT ON TABLE public.holds_awaiting_decision TO ledger_retention;

--
-- Name: TABLE ledger_counts; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT,UPDATE ON TABLE public.ledger_counts TO ledger_api;
GRANT SELECT ON TABLE public.ledger_counts TO ledger_custodian;
GRANT SELECT ON TABLE public.ledger_counts TO ledger_inspector;
GRANT SELECT ON TABLE public.ledger_counts TO ledger_retention;
GRANT SELECT,INSERT,UPDATE ON TABLE public.ledger_counts TO ledger_engine;

--
-- Name: TABLE ledger_counts_by_authority; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.ledger_counts_by_authority TO ledger_api;
GRANT SELECT ON TABLE public.ledger_counts_by_authority TO ledger_custodian;
GRANT SELECT ON TABLE public.ledger_counts_by_authority TO ledger_inspector;
GRANT SELECT ON TABLE public.ledger_counts_by_authority TO ledger_retention;

--
-- Name: TABLE ledger_distribution; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.ledger_distribution TO ledger_inspector;

--
-- Name: TABLE ledger_function_sources; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.ledger_function_sources TO ledger_api;
GRANT SELECT ON TABLE public.ledger_function_sources TO ledger_custodian;
GRANT SELECT ON TABLE public.ledger_function_sources TO ledger_inspector;
GRANT SELECT ON TABLE public.ledger_function_sources TO ledger_retention;

--
-- Name: TABLE provider_kinds; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.provider_kinds TO ledger_api;
GRANT SELECT ON TABLE public.provider_kinds TO ledger_custodian;
GRANT SELECT ON TABLE public.provider_kinds TO ledger_inspector;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.provider_kinds TO ledger_engine;

--
-- Name: TABLE provider_limits; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.provider_limits TO ledger_api;
GRANT SELECT ON TABLE public.provider_limits TO ledger_custodian;
GRANT SELECT ON TABLE public.provider_limits TO ledger_inspector;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.provider_limits TO ledger_engine;

--
-- Name: TABLE provider_places; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.provider_places TO ledger_api;
GRANT SELECT ON TABLE public.provider_places TO ledger_custodian;
GRANT SELECT ON TABLE public.provider_places TO ledger_inspector;
GRANT SELECT,INSERT,DELETE,UPDATE ON TABLE public.provider_places TO ledger_engine;

--
-- Name: TABLE pruned_commands; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.pruned_commands TO ledger_api;
GRANT SELECT ON TABLE public.pruned_commands TO ledger_inspector;
GRANT SELECT ON TABLE public.pruned_commands TO ledger_retention;

--
-- Name: TABLE webhook_attempts; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT ON TABLE public.webhook_attempts TO ledger_api;
GRANT SELECT,INSERT ON TABLE public.webhook_attempts TO ledger_custodian;
GRANT SELECT ON TABLE public.webhook_attempts TO ledger_inspector;

--
-- Name: TABLE webhook_endpoints; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT,INSERT ON TABLE public.webhook_endpoints TO ledger_api;
GRANT SELECT ON TABLE public.webhook_endpoints TO ledger_custodian;

--
-- Name: COLUMN webhook_endpoints.id; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT(id) ON TABLE public.webhook_endpoints TO ledger_inspector;

--
-- Name: COLUMN webhook_endpoints.scope; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT(scope) ON TABLE public.webhook_endpoints TO ledger_inspector;

--
-- Name: COLUMN webhook_endpoints.url; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT(url) ON TABLE public.webhook_endpoints TO ledger_inspector;

--
-- Name: COLUMN webhook_endpoints.kinds; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT(kinds) ON TABLE public.webhook_endpoints TO ledger_inspector;

--
-- Name: COLUMN webhook_endpoints.states; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT(states) ON TABLE public.webhook_endpoints TO ledger_inspector;

--
-- Name: COLUMN webhook_endpoints.created_at; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT(created_at) ON TABLE public.webhook_endpoints TO ledger_inspector;

--
-- Name: COLUMN webhook_endpoints.created_by; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT(created_by) ON TABLE public.webhook_endpoints TO ledger_inspector;

--
-- Name: COLUMN webhook_endpoints.disabled_at; Type: ACL; Schema: public; Owner: -
--

GRANT UPDATE(disabled_at) ON TABLE public.webhook_endpoints TO ledger_api;
GRANT SELECT(disabled_at) ON TABLE public.webhook_endpoints TO ledger_inspector;

--
-- Name: TABLE webhook_events; Type: ACL; Schema: public; Owner: -
--

GRANT SELECT ON TABLE public.webhook_events TO ledger_api;
GRANT SELECT ON TABLE public.webhook_events TO ledger_custodian;
GRANT SELECT ON TABLE public.webhook_events TO ledger_inspector;

--
-- Name: COLUMN webhook_events.expires_at; Type: ACL; Schema: public; Owner: -
--

GRANT UPDATE(expires_at) ON TABLE public.webhook_events TO ledger_api;
GRANT UPDATE(expires_at) ON TABLE public.webhook_events TO ledger_custodian;

--
-- Name: COLUMN webhook_events.next_attempt_at; Type: ACL; Schema: public; Owner: -
--

GRANT UPDATE(next_attempt_at) ON TABLE public.webhook_events TO ledger_api;
GRANT UPDATE(next_attempt_at) ON TABLE public.webhook_events TO ledger_custodian;

--
-- Name: COLUMN webhook_events.attempts; Type: ACL; Schema: public; Owner: -
--

GRANT UPDATE(attempts) ON TABLE public.webhook_events TO ledger_api;
GRANT UPDATE(attempts) ON TABLE public.webhook_events TO ledger_custodian;

--
-- Name: COLUMN webhook_events.delivered_at; Type: ACL; Schema: public; Owner: -
--

GRANT UPDATE(delivered_at) ON TABLE public.webhook_events TO ledger_api;
GRANT UPDATE(delivered_at) ON TABLE public.webhook_events TO ledger_custodian;

--
-- Name: COLUMN webhook_events.state; Type: ACL; Schema: public; Owner: -
--

GRANT UPDATE(state) ON TABLE public.webhook_events TO ledger_api;
GRANT UPDATE(state) ON TABLE public.webhook_events TO ledger_custodian;

--
-- Name: COLUMN webhook_events.last_error; Type: ACL; Schema: public; Owner: -
--

GRANT UPDATE(last_error) ON TABLE public.webhook_events TO ledger_api;
GRANT UPDATE(last_error) ON TABLE public.webhook_events TO ledger_custodian;

--
-- PostgreSQL database dump complete
--

