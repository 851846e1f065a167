-- The A side of docs/design/engine-v3/immutables/ab.sh: a database migrated to
-- 0034, put back as 0033 left it (commands_guard of the baseline, the eight
-- CHECK constraints 0034 moved into it).

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

alter table commands
    add CONSTRAINT commands_authority_format CHECK ((authority_id ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$'::text)),
    add CONSTRAINT commands_digest_is_sha256 CHECK ((octet_length(request_digest) = 32)),
    add CONSTRAINT commands_intent_digest_is_sha256 CHECK (((intent_digest IS NULL) OR (octet_length(intent_digest) = 32))),
    add CONSTRAINT commands_intent_epoch_positive CHECK ((intent_epoch > 0)),
    add CONSTRAINT commands_key_length CHECK (((octet_length(idempotency_key) >= 1) AND (octet_length(idempotency_key) <= 255))),
    add CONSTRAINT commands_kind_format CHECK ((kind ~ '^[a-z][a-z0-9_.-]{0,63}$'::text)),
    add CONSTRAINT commands_pinned_generation_non_negative CHECK ((pinned_generation >= 0)),
    add CONSTRAINT commands_priority_in_range CHECK (((priority >= '-100'::integer) AND (priority <= 100)));
