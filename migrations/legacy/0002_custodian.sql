-- The custodian layer: commands may pin the authority generation they are
-- meant for; history reasons fall back to the outcome's recorded reason; and
-- terminal transitions notify waiting API processes.

alter table commands add column pinned_generation bigint;
alter table commands add constraint commands_pinned_generation_non_negative
    check (pinned_generation >= 0);

comment on column commands.pinned_generation is
    'Set when the submission pinned the authority generation: the command runs only under that generation, '
    'and expires (authority_superseded) if the authority moves on before its effect starts.';

create function commands_pinned_generation_immutable() returns trigger
language plpgsql as $$
begin
    if new.pinned_generation is distinct from old.pinned_generation then
        raise exception 'command % pinned generation is immutable', old.id
            using errcode = 'CL003';
    end if;
    return new;
end;
$$;

create trigger commands_pinned_generation_immutable
    before update on commands
    for each row execute function commands_pinned_generation_immutable();

-- A transition that records an error names its reason (deadline_passed,
-- authority_superseded, not_dispatched, timeout, ...); the history takes it
-- when the transaction did not set command_ledger.reason itself.
create or replace function commands_record_history() returns trigger
language plpgsql as $$
begin
    if tg_op = 'INSERT' then
        insert into command_history (command_id, from_state, to_state, actor, authority_generation, reason)
        values (new.id, null, new.state, ledger_actor(), new.authority_generation, ledger_reason());
    elsif new.state <> old.state
          or new.authority_generation is distinct from old.authority_generation then
        insert into command_history (command_id, from_state, to_state, actor, authority_generation, reason)
        values (new.id, old.state, new.state, ledger_actor(), new.authority_generation,
                coalesce(ledger_reason(),
                         case when new.state <> old.state then new.error ->> 'reason' end,
                         case when new.state = old.state then 'adopted by generation ' || new.authority_generation end));
    end if;
    return null;
end;
$$;

-- Waiters in API processes learn of an outcome without polling: one
-- notification per command reaching a terminal state, delivered at commit
-- (so a batch of outcomes costs one notification queue lock per transaction).
create function commands_notify_outcome() returns trigger
language plpgsql as $$
begin
    perform pg_notify('command_ledger_outcome', new.id::text);
    return null;
end;
$$;

create trigger commands_notify_outcome
    after update of state on commands
    for each row
    when (new.state in ('applied', 'failed', 'ambiguous', 'cancelled', 'expired') and new.state <> old.state)
    execute function commands_notify_outcome();

comment on function commands_notify_outcome() is
    'NOTIFY command_ledger_outcome, payload the command id, when a command becomes terminal.';

-- Adoption looks for prepared rows of an authority bound to an older generation.
create index commands_prepared_by_authority_idx on commands (authority_id, authority_generation)
    where state = 'prepared';
