CREATE OR REPLACE FUNCTION public.commands_guard()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
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
$function$
;

comment on function commands_guard() is
    'Before each row change of commands: on insert, a command created pending and its immutable columns'' rules (0034: formats, lengths, ranges; SQLSTATE 23514 under the former CHECK constraints'' names); on update, the state machine and the immutability of the identity columns (the trace context and the attempt among them); only the engine writes an attempt after the first; on delete, only terminal commands.';

grant execute on function commands_guard() to public;
