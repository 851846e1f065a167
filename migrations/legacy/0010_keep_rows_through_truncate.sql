-- Truncate fires no row triggers, so the row-level refusals to delete a hold
-- (holds_guard) or a command that prune_commands() has not archived
-- (commands_guard_delete) did not stop `truncate holds`; commands were only
-- spared by the foreign keys of the history, by accident. Every table whose
-- rows the ledger keeps now refuses truncate with a statement trigger of its
-- own (command_history, pruned_commands, the reference tables and
-- authorities already do). tests/it/schema.rs checks the catalog: a new
-- table either refuses truncate or is listed there with a reason.

create function refuse_holds_truncate() returns trigger
language plpgsql as $$
begin
    raise exception 'holds are kept: holds cannot be truncated'
        using errcode = 'CL006';
end;
$$;

comment on function refuse_holds_truncate() is
    'Refuses truncate on holds: like deleting one (holds_guard), it would forget a decision or a request awaiting one.';

create trigger holds_kept
    before truncate on holds
    for each statement execute function refuse_holds_truncate();

create function refuse_commands_truncate() returns trigger
language plpgsql as $$
begin
    raise exception 'commands are deleted only by prune_commands(), which archives them first'
        using errcode = 'CL002';
end;
$$;

comment on function refuse_commands_truncate() is
    'Refuses truncate on commands: a command leaves the ledger only through prune_commands(), archived.';

create trigger commands_kept
    before truncate on commands
    for each statement execute function refuse_commands_truncate();
