-- What only one node has (from migrations/legacy/0030_engine_steps.sql): the engine's
-- role, rights and triggers that skip it; on Citus the engine steps are dropped and
-- custodians keep the trigger path.

do $migration$
declare
    one_node boolean := not exists (select 1 from pg_extension where extname = 'citus');
begin
    if not one_node then
        raise notice 'citus: the engine steps are not installed; custodians keep the trigger path';
        return;
    end if;
    if not exists (select 1 from pg_roles where rolname = 'ledger_engine')
       or not pg_has_role(current_user, 'ledger_engine', 'member') then
        raise exception 'the engine steps (0032) need the role ledger_engine and the migrating role as its member'
            using errcode = 'CL010',
                  hint = 'Migrate with `command-ledger migrate`, which creates the role and makes the owner its '
                         'member while migrations run; or have an administrator run: create role ledger_engine '
                         'nologin; grant ledger_engine to ' || quote_ident(current_user)
                         || '; then migrate again, then: revoke ledger_engine from ' || quote_ident(current_user);
    end if;

    create trigger commands_identity_digest_kept
        before update of identity_digest on commands
        for each row when (current_user <> 'ledger_engine' and new.identity_digest is distinct from old.identity_digest)
        execute function commands_identity_digest_immutable();

    -- The engine's rights: its four tables, the authorities it fences on,
    -- the history's sequence and the counters.
    grant usage on schema public to ledger_engine;
    grant select, update on commands to ledger_engine;
    grant select, insert on command_history to ledger_engine;
    grant select, update, delete on command_queue to ledger_engine;
    grant select, insert, delete on command_in_flight to ledger_engine;
    -- Locking a row (the lease, for share) needs an UPDATE right on a column.
    grant select, update (lease_holder) on authorities to ledger_engine;
    grant usage on sequence command_history_id_seq to ledger_engine;
    grant select, insert, update on ledger_counts to ledger_engine;
    create policy commands_engine on commands for all to ledger_engine using (true) with check (true);

    -- Every trigger that does the engine's work for other writers skips it.
    drop trigger commands_guard on commands;
    create trigger commands_guard before insert or delete or update on commands
        for each row when (current_user <> 'ledger_engine') execute function commands_guard();
    drop trigger commands_record_changes on commands;
    create trigger commands_record_changes after update on commands
        referencing old table as old_rows new table as new_rows
        for each statement when (current_user <> 'ledger_engine') execute function commands_record_changes();
    drop trigger command_history_counts on command_history;
    create trigger command_history_counts after insert on command_history
        referencing new table as new_rows
        for each statement when (current_user <> 'ledger_engine') execute function ledger_count_history();
    drop trigger command_queue_follows_commands on command_queue;
    create trigger command_queue_follows_commands before insert or delete or update or truncate on command_queue
        for each statement when (current_user <> 'ledger_engine') execute function refuse_direct_work_change();
    drop trigger command_in_flight_follows_commands on command_in_flight;
    create trigger command_in_flight_follows_commands before insert or delete or update or truncate on command_in_flight
        for each statement when (current_user <> 'ledger_engine') execute function refuse_direct_work_change();

    -- The history leaves with its (archived) command by this trigger, not by
    -- the foreign key's cascade.
    alter table command_history drop constraint command_history_command_id_fkey;
end
$migration$;

do $migration$
begin
    if not exists (select 1 from pg_extension where extname = 'citus') then
        create trigger commands_history_leaves after delete on commands
            referencing old table as old_rows
            for each statement execute function commands_history_leaves();
    end if;
end
$migration$;

-- Only the engine may run them as themselves: owned by ledger_engine, run by
-- the custodian. On Citus they are not kept (the trigger path runs there).
do $migration$
begin
    if exists (select 1 from pg_extension where extname = 'citus') then
        drop function ledger_claim_start(text[], text, integer);
        drop function ledger_record_outcomes(text, bigint, jsonb);
    else
        alter function ledger_claim_start(text[], text, integer) owner to ledger_engine;
        alter function ledger_record_outcomes(text, bigint, jsonb) owner to ledger_engine;
        revoke all on function ledger_claim_start(text[], text, integer) from public;
        revoke all on function ledger_record_outcomes(text, bigint, jsonb) from public;
        grant execute on function ledger_claim_start(text[], text, integer) to ledger_custodian;
        grant execute on function ledger_record_outcomes(text, bigint, jsonb) to ledger_custodian;
    end if;
end
$migration$;
