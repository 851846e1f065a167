-- A prototype measured and NOT taken (docs/runs/engine-levers-not-taken.txt): the
-- identity digest computed at insert. Applied by hand with psql to a database
-- migrated to 0033; its header below is as it was written for the trial.

-- 0034: a command's identity digest is computed once, when it is inserted.
--
-- identity-v2 (ledger_identity_digest: SHA-256 of the immutable columns, the
-- arguments and canonical form among them) was computed by the first engine
-- step that moved a command (0030), inside the custodian's claim, where it
-- was the largest single piece of the step (about 20 us of the claim's 100 a
-- command, docs/design/engine-v3.md). The insert already hashed the same
-- columns once, for the pending entry's row-v1 digest. Now the insert
-- computes identity-v2 instead (commands_guard, before insert, whatever the
-- inserting statement wrote in the column), and the pending entry's row
-- digest is row-v2 over it: the same columns covered, one large hash a
-- command instead of two, and none left in the custodian's steps (they read
-- the column, falling back to computing it for rows inserted before 0034).
--
-- verify is unchanged: it never reads the column, recomputes identity-v2 from
-- the row, and accepts row-v1 or row-v2 for a command's last entry (a pending
-- command's only one); the chain covers earlier entries' digests as written.
-- On Citus the guard and the insert's row trigger run on the shards, so the
-- column is filled there too; the Citus steps (0033) still compute the digest
-- in their locking select.

create or replace function commands_guard() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
begin
    if tg_op = 'INSERT' then
        if new.state <> 'pending' then
            raise exception 'a command is created pending, not %', new.state
                using errcode = 'CL001';
        end if;
        new.updated_at := new.created_at;
        -- identity-v2 of the immutable columns, once, whatever the insert
        -- wrote there (0034): the pending entry's row digest and every engine
        -- step's read it.
        new.identity_digest := ledger_identity_digest(
            new.id, new.scope, new.idempotency_key, new.request_digest, new.digest_version, new.kind,
            new.authority_id, new.run_id, new.args, new.canonical, new.created_at, new.deadline_at,
            new.pinned_generation, new.intent_digest, new.canonical_rules, new.intent_epoch);
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
       or new.canonical <> old.canonical or new.created_at <> old.created_at then
        raise exception 'command % identity columns are immutable', old.id
            using errcode = 'CL003';
    end if;
    if new.not_before is distinct from old.not_before or new.priority <> old.priority then
        raise exception 'command % not_before and priority are immutable', old.id
            using errcode = 'CL003';
    end if;
    if new.intent_digest is distinct from old.intent_digest
       or new.canonical_rules is distinct from old.canonical_rules
       or new.intent_epoch is distinct from old.intent_epoch then
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
$$;

create or replace function commands_record_inserts() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
begin
    insert into command_history (authority_id, command_id, from_state, to_state, at, actor, authority_generation, reason,
                                 row_digest, prev_hash, hash)
    select e.authority_id, e.id, null, e.state, e.at, e.actor, e.authority_generation, e.reason, e.row_digest, null,
           ledger_entry_hash(null, e.id, null, e.state, e.at, e.actor, e.authority_generation, e.reason,
                             e.row_digest)
    from (
        select n.authority_id, n.id, n.state, now() as at, coalesce(a.actor, ledger_actor()) as actor,
               n.authority_generation, ledger_reason() as reason,
               ledger_row_digest_v2(n.identity_digest, n.state, n.authority_generation, n.result, n.error,
                                    n.finished_at) as row_digest
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
$$;

create or replace function commands_record_insert_row() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
declare
    entry_at timestamptz := now();
    entry_actor text := coalesce((select a.actor from ledger_actors() a where a.command_id = new.id), ledger_actor());
    entry_reason text := ledger_reason();
    entry_digest bytea := ledger_row_digest_v2(new.identity_digest, new.state, new.authority_generation,
                                               new.result, new.error, new.finished_at);
begin
    insert into command_history (authority_id, command_id, from_state, to_state, at, actor, authority_generation,
                                 reason, row_digest, prev_hash, hash)
    values (new.authority_id, new.id, null, new.state, entry_at, entry_actor, new.authority_generation,
            entry_reason, entry_digest, null,
            ledger_entry_hash(null, new.id, null, new.state, entry_at, entry_actor, new.authority_generation,
                              entry_reason, entry_digest));
    insert into command_queue (authority_id, id, rank, ready_at)
    values (new.authority_id, new.id, ledger_claim_rank(new.created_at, new.not_before, new.priority), new.not_before);
    return null;
end;
$$;

comment on column commands.identity_digest is
    'SHA-256 of the immutable columns (identity-v2, ledger_identity_digest), computed when the command is inserted '
    '(commands_guard, 0034; for commands inserted before 0034, by the first engine step that moves it, 0030); the '
    'pending entry''s row digest and the engine steps'' row-v2 digests cover it and the columns a transition changes. '
    'A cache: verify recomputes it from the columns and never reads it.';

comment on function commands_record_inserts() is
    'After each insert statement on commands: each new command''s first history entry (the head of its hash chain; '
    'its row digest row-v2 over the identity digest commands_guard computed: 0034) and its place in command_queue.';
comment on function commands_record_insert_row() is
    'Row-level form of commands_record_inserts() (used on Citus): the new command''s first history entry (row-v2, '
    '0034) and its place in command_queue.';
