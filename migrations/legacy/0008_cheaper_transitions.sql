-- Cheaper state changes, with the same rules (docs/PERFORMANCE.md has the
-- measurements).
--
-- 1. The state columns are checked against the fixed list of states instead
--    of by foreign keys to command_states. command_states is frozen reference
--    data (CL004), so the set is the same; but each foreign-key check took a
--    KEY SHARE lock on one of its eight rows, so every concurrent submit and
--    custodian transaction locked the same rows (sharing MultiXacts on them)
--    three times per state change.
-- 2. History for updates is written once per statement from its transition
--    tables (one insert for a claimed batch instead of one per row), and the
--    outcome notifications are sent by the same statement-level trigger.
-- 3. The immutability checks of the intent and pinned-generation columns move
--    into commands_guard: one row trigger before each update instead of three.

alter table commands drop constraint commands_state_fkey;
alter table commands add constraint commands_state_known check (state in (
    'pending', 'prepared', 'effect_started', 'applied', 'failed', 'ambiguous', 'cancelled', 'expired'));

alter table command_history drop constraint command_history_from_state_fkey;
alter table command_history drop constraint command_history_to_state_fkey;
alter table command_history add constraint command_history_states_known check (
    from_state in ('pending', 'prepared', 'effect_started', 'applied', 'failed', 'ambiguous', 'cancelled', 'expired')
    and to_state in ('pending', 'prepared', 'effect_started', 'applied', 'failed', 'ambiguous', 'cancelled', 'expired'));

comment on constraint commands_state_known on commands is
    'The states of command_states (frozen reference data), without a lock on it per change.';
comment on constraint command_history_states_known on command_history is
    'The states of command_states (frozen reference data), without a lock on it per entry.';

-- One guard before each insert, update and delete (the delete archive check
-- stays in commands_guard_delete).
create or replace function commands_guard() returns trigger
language plpgsql as $$
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
        if old.state in (select state from command_states where not terminal) then
            raise exception 'command % is % and cannot be deleted before it is terminal', old.id, old.state
                using errcode = 'CL002';
        end if;
        return old;
    end if;

    -- UPDATE
    if (select terminal from command_states where state = old.state) then
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
        if not exists (select 1 from command_transitions
                       where from_state = old.state and to_state = new.state) then
            raise exception 'illegal transition % -> % for command %', old.state, new.state, old.id
                using errcode = 'CL001';
        end if;
        if (select terminal from command_states where state = new.state) then
            new.finished_at := coalesce(new.finished_at, now());
        end if;
    end if;
    new.updated_at := now();
    return new;
end;
$$;

drop trigger commands_intent_immutable on commands;
drop function commands_intent_immutable();
drop trigger commands_pinned_generation_immutable on commands;
drop function commands_pinned_generation_immutable();

-- Creation stays a row trigger (a submit inserts one row).
drop trigger commands_record_history on commands;
create trigger commands_record_history
    after insert on commands
    for each row execute function commands_record_history();

create function commands_record_changes() returns trigger
language plpgsql as $$
begin
    insert into command_history (command_id, from_state, to_state, actor, authority_generation, reason)
    select n.id, o.state, n.state, ledger_actor(), n.authority_generation,
           coalesce(ledger_reason(),
                    case when n.state <> o.state then n.error ->> 'reason' end,
                    case when n.state = o.state then 'adopted by generation ' || n.authority_generation end)
    from new_rows n join old_rows o on o.id = n.id
    where n.state <> o.state or n.authority_generation is distinct from o.authority_generation
    order by n.id;

    perform pg_notify('command_ledger_outcome', n.id::text)
    from new_rows n join old_rows o on o.id = n.id
    where n.state <> o.state
      and n.state in ('applied', 'failed', 'ambiguous', 'cancelled', 'expired');
    return null;
end;
$$;

comment on function commands_record_changes() is
    'After each update statement on commands: one history entry per changed row (state or generation), '
    'and NOTIFY command_ledger_outcome with the command id for each row that became terminal.';

drop trigger commands_notify_outcome on commands;
drop function commands_notify_outcome();

create trigger commands_record_changes
    after update on commands
    referencing old table as old_rows new table as new_rows
    for each statement execute function commands_record_changes();
