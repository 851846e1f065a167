-- 0038: the queue carries each pending command's deadline, so that recovery
-- finds the overdue ones by an index instead of reading every live command.
--
-- A recovery pass (every custodian's, each 5 s by default, and `command-ledger
-- recover`) looked for pending commands past their deadline by joining the
-- whole queue and everything in flight to commands: with a backlog the plan
-- read every live command, and with a large one PostgreSQL read the whole of
-- commands, finished ones included (EXPLAIN ANALYZE on one node with
-- 200,000 pending commands: a parallel sequential scan of commands, 48 ms a
-- pass), however few were overdue. The pass now reads the claimed commands (command_in_flight, as many as the
-- custodians hold) and, apart, the pending ones whose deadline has passed,
-- through command_queue_overdue, by deadline.
--
-- The triggers that add a command's queue row give it the command's
-- deadline, and rows already queued get theirs from their command. A
-- pending command's deadline may still be changed by SQL (no statement of
-- the service changes one): a row trigger of commands,
-- commands_queue_deadline, carries the change to the queue.

do $migration$
begin
    -- On Citus, one connection a node for every statement below: the
    -- functions re-created at the end are distributed objects, which Citus
    -- will not change after a statement that used several connections to a
    -- node in the same transaction.
    if exists (select 1 from pg_extension where extname = 'citus') then
        set local citus.multi_shard_modify_mode = 'sequential';
    end if;
end
$migration$;

CREATE FUNCTION public.commands_queue_follows_deadline()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
begin
    update command_queue q set deadline_at = new.deadline_at
    where q.authority_id = new.authority_id and q.id = new.id;
    return null;
end;
$function$;

comment on function commands_queue_follows_deadline() is
    'After a pending command''s deadline_at changed: gives its queue row the new one (0038).';

alter table command_queue add column deadline_at timestamptz;

do $migration$
begin
    -- command_queue refuses every statement that does not come from the
    -- triggers of commands: off while the column is filled (on Citus, for
    -- the shards too, with this setting and all the user's triggers at once).
    if exists (select 1 from pg_extension where extname = 'citus') then
        set local citus.enable_unsafe_triggers = on;
    end if;
    alter table command_queue disable trigger user;
    update command_queue q
    set deadline_at = c.deadline_at
    from commands c
    where c.authority_id = q.authority_id and c.id = q.id and c.deadline_at is not null;
    alter table command_queue enable trigger user;
    -- Inside the block: Citus sends an index's statement on to the shards
    -- by its text, which must be the one statement.
    create index command_queue_overdue on command_queue (deadline_at, id) where deadline_at is not null;
    -- A row trigger on both layouts (a deadline changed by hand is rare):
    -- on Citus it runs on the shards beside the queue's rows.
    create trigger commands_queue_deadline after update of deadline_at on commands for each row
        when (new.deadline_at is distinct from old.deadline_at and new.state = 'pending')
        execute function commands_queue_follows_deadline();
    comment on trigger commands_queue_deadline on commands is
        'Carries a pending command''s changed deadline_at to its queue row (0038).';
end
$migration$;

comment on column command_queue.deadline_at is
    'The command''s deadline_at (null: none), for recovery''s look-up of overdue pending commands (0038).';
comment on index command_queue_overdue is
    'Pending commands with a deadline, soonest first: recovery reads the overdue ones from its start (0038).';

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
    insert into command_queue (authority_id, id, rank, ready_at, deadline_at)
    values (new.authority_id, new.id, ledger_claim_rank(new.created_at, new.not_before, new.priority), new.not_before,
            new.deadline_at);
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

    insert into command_queue (authority_id, id, rank, ready_at, deadline_at)
    select n.authority_id, n.id, ledger_claim_rank(n.created_at, n.not_before, n.priority), n.not_before, n.deadline_at
    from new_rows n;
    return null;
end;
$function$;
