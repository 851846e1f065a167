-- Storage v2: a ledger row that updates in place.
--
-- Until now the claimable set and the live set lived in partial indexes of
-- `commands` (on `state`, `authority_generation`, `updated_at`), so every
-- transition of a command rewrote every one of its six indexes (0 % HOT
-- updates). Those sets move to two small tables, kept by the database's own
-- triggers (so SQL typed by hand keeps them right too):
--
--   command_queue      (authority_id, id)  pending rows nobody claimed yet:
--                      inserted with the command, deleted when it leaves
--                      `pending` (claimed, cancelled, expired);
--   command_in_flight  (authority_id, id)  claimed rows not yet terminal
--                      (`prepared`, `effect_started`): what recovery and the
--                      claim's stale-row pass must find.
--
-- No index of `commands` mentions a column a transition changes any more, and
-- the table keeps free room in each page, so transitions are HOT updates.
-- Every key of the new tables starts with `authority_id` (the column the
-- ledger is distributed by).

create table command_queue (
    authority_id text not null,
    id uuid not null,
    primary key (authority_id, id)
);

comment on table command_queue is
    'Pending commands nobody has claimed yet, per authority, oldest first (ids are time-ordered). '
    'Written by the commands triggers: a row is added with its command and removed when the command leaves pending. '
    'The claim reads it with FOR UPDATE SKIP LOCKED.';
comment on column command_queue.authority_id is 'The authority whose custodian may claim the command.';
comment on column command_queue.id is 'The pending command (commands.id).';

create table command_in_flight (
    authority_id text not null,
    id uuid not null,
    primary key (authority_id, id)
);

comment on table command_in_flight is
    'Claimed commands that are not terminal yet (prepared or effect_started), per authority. '
    'Written by the commands triggers: a row is added when a command leaves pending for prepared and removed when it becomes terminal. '
    'Recovery finds every effect_started command here.';
comment on column command_in_flight.authority_id is 'The authority the command is bound to.';
comment on column command_in_flight.id is 'The claimed command (commands.id).';

-- Both tables churn: one insert and one delete per command. Vacuum them
-- often so the claim's index scan does not wade through dead entries.
alter table command_queue set (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
                               autovacuum_vacuum_insert_scale_factor = 0,
                               autovacuum_vacuum_insert_threshold = 5000);
alter table command_in_flight set (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
                                   autovacuum_vacuum_insert_scale_factor = 0,
                                   autovacuum_vacuum_insert_threshold = 5000);

-- What is already there: pending rows queue, claimed rows are in flight.
insert into command_queue (authority_id, id)
select authority_id, id from commands where state = 'pending';
insert into command_in_flight (authority_id, id)
select authority_id, id from commands where state in ('prepared', 'effect_started');

-- The indexes that named transition columns go; what they served is read
-- from the tables above (and the ambiguous list from the history, below).
drop index commands_pending_claim_idx;
drop index commands_prepared_by_authority_idx;
drop index commands_in_flight_idx;
drop index commands_ambiguous_idx;

-- Ambiguous commands by when they ended, from the append-only history: a
-- command becomes ambiguous once, and the entry is never rewritten.
create index command_history_ambiguous_idx on command_history (at) where to_state = 'ambiguous';
comment on index command_history_ambiguous_idx is
    'Commands that ended ambiguous, by when: the operator''s list and the ambiguous count stay cheap as the ledger grows.';

-- Room in each page for the new versions of its rows (HOT needs the new
-- version on the same page). Pages written before this migration fill up as
-- they were; new pages keep the room.
alter table commands set (fillfactor = 60);

-------------------------------------------------------------------------------
-- Creation: one statement-level trigger (a batch of submissions is one insert
-- statement): the first history entry of each new command, and its place in
-- the queue.
-------------------------------------------------------------------------------

drop trigger commands_record_history on commands;
drop function commands_record_history();

-- One insert statement may record the commands of many principals (the
-- group commit, the batch endpoint): each row's actor travels in the
-- transaction-local setting command_ledger.actors, {"<command id>": actor},
-- set in the same statement. A row it does not name has the actor of
-- command_ledger.actor, as before.
create function ledger_actors() returns table (command_id uuid, actor text)
language sql stable as $$
    select key::uuid, value
    from jsonb_each_text(coalesce(nullif(current_setting('command_ledger.actors', true), ''), '{}')::jsonb)
$$;

comment on function ledger_actors() is
    'Per-command actors of a multi-row insert: setting command_ledger.actors ({"<command id>": actor}), as rows.';

create function commands_record_inserts() returns trigger
language plpgsql as $$
begin
    insert into command_history (command_id, from_state, to_state, at, actor, authority_generation, reason,
                                 row_digest, prev_hash, hash)
    select e.id, null, e.state, e.at, e.actor, e.authority_generation, e.reason, e.row_digest, null,
           ledger_entry_hash(null, e.id, null, e.state, e.at, e.actor, e.authority_generation, e.reason,
                             e.row_digest)
    from (
        select n.id, n.state, now() as at, coalesce(a.actor, ledger_actor()) as actor,
               n.authority_generation, ledger_reason() as reason,
               ledger_row_digest(n::commands) as row_digest
        from new_rows n
        left join ledger_actors() a on a.command_id = n.id
    ) e
    order by e.id;

    insert into command_queue (authority_id, id)
    select n.authority_id, n.id from new_rows n;
    return null;
end;
$$;

comment on function commands_record_inserts() is
    'After each insert statement on commands: each new command''s first history entry (the head of its hash chain) '
    'and its place in command_queue.';

create trigger commands_record_inserts
    after insert on commands
    referencing new table as new_rows
    for each statement execute function commands_record_inserts();

-------------------------------------------------------------------------------
-- Every other change, once per statement: history and NOTIFY as before
-- (0012), and the queue and in-flight tables follow the state.
-------------------------------------------------------------------------------

create or replace function commands_record_changes() returns trigger
language plpgsql as $$
begin
    insert into command_history (command_id, from_state, to_state, at, actor, authority_generation, reason,
                                 row_digest, prev_hash, hash)
    select e.id, e.from_state, e.to_state, e.at, e.actor, e.authority_generation, e.reason,
           e.row_digest, e.prev_hash,
           ledger_entry_hash(e.prev_hash, e.id, e.from_state, e.to_state, e.at, e.actor,
                             e.authority_generation, e.reason, e.row_digest)
    from (
        select n.id, o.state as from_state, n.state as to_state, now() as at, ledger_actor() as actor,
               n.authority_generation,
               coalesce(ledger_reason(),
                        case when n.state <> o.state then n.error ->> 'reason' end,
                        case when n.state = o.state then 'adopted by generation ' || n.authority_generation end)
                   as reason,
               ledger_row_digest(n::commands) as row_digest,
               (select h.hash from command_history h where h.command_id = n.id
                order by h.id desc limit 1) as prev_hash
        from new_rows n join old_rows o on o.id = n.id
        where n.state <> o.state or n.authority_generation is distinct from o.authority_generation
    ) e
    order by e.id;

    -- Left pending: out of the queue (a claim, a cancel, an expiry).
    delete from command_queue q
    using old_rows o join new_rows n on n.id = o.id
    where o.state = 'pending' and n.state <> 'pending'
      and q.authority_id = o.authority_id and q.id = o.id;

    -- Claimed: in flight until terminal.
    insert into command_in_flight (authority_id, id)
    select n.authority_id, n.id
    from old_rows o join new_rows n on n.id = o.id
    where o.state = 'pending' and n.state in ('prepared', 'effect_started');

    delete from command_in_flight f
    using old_rows o join new_rows n on n.id = o.id
    where o.state in ('prepared', 'effect_started')
      and n.state in ('applied', 'failed', 'ambiguous', 'cancelled', 'expired')
      and f.authority_id = o.authority_id and f.id = o.id;

    perform pg_notify('command_ledger_outcome', n.id::text)
    from new_rows n join old_rows o on o.id = n.id
    where n.state <> o.state
      and n.state in ('applied', 'failed', 'ambiguous', 'cancelled', 'expired');
    return null;
end;
$$;

comment on function commands_record_changes() is
    'After each update statement on commands: one chained history entry per changed row (state or generation); '
    'command_queue and command_in_flight follow the state (out of the queue on leaving pending, in flight from '
    'the claim until terminal); NOTIFY command_ledger_outcome with the command id for each row that became terminal.';

-------------------------------------------------------------------------------
-- The live view reads the small tables, not a scan of every command.
-------------------------------------------------------------------------------

create or replace view command_oldest_in_flight as
select s.state,
       count(c.id) as commands,
       min(c.created_at) as oldest_created_at,
       now() - min(c.created_at) as oldest_age,
       now() - min(c.updated_at) as longest_in_state
from command_states s
left join (
    select c.state, c.id, c.created_at, c.updated_at
    from (select id from command_queue union all select id from command_in_flight) live
    join commands c on c.id = live.id
) c on c.state = s.state
where not s.terminal
group by s.state, s.position
order by s.position;

comment on view command_oldest_in_flight is
    'Per non-terminal state: how many commands, the age of the oldest, and the longest time one has sat in that state '
    '(read from command_queue and command_in_flight).';

-------------------------------------------------------------------------------
-- The queue and the in-flight table follow `commands` and nothing else: a row
-- deleted by hand would strand its command, a row added by hand would claim a
-- command twice. Only the commands triggers write them.
-------------------------------------------------------------------------------

create function refuse_direct_work_change() returns trigger
language plpgsql as $$
begin
    if pg_trigger_depth() < 2 then
        raise exception '% is written only by the triggers of commands; change the command instead', tg_table_name
            using errcode = 'CL008';
    end if;
    return null;
end;
$$;

comment on function refuse_direct_work_change() is
    'Refuses a statement on command_queue or command_in_flight that does not come from a trigger of commands.';

create trigger command_queue_follows_commands
    before insert or update or delete or truncate on command_queue
    for each statement execute function refuse_direct_work_change();
create trigger command_in_flight_follows_commands
    before insert or update or delete or truncate on command_in_flight
    for each statement execute function refuse_direct_work_change();

-------------------------------------------------------------------------------
-- The guard asked command_states and command_transitions three times per row
-- and transition (a query each). Both tables are frozen (0001, CL004), so
-- their answers are compiled once, here, from the tables themselves, into
-- two immutable functions the guard evaluates without a query.
-------------------------------------------------------------------------------

do $migration$
declare
    terminal_states text;
    allowed_pairs text;
begin
    select string_agg(quote_literal(s.state), ', ' order by s.position) into terminal_states
    from command_states s where s.terminal;
    select string_agg(format('(%L, %L)', t.from_state, t.to_state), ', ' order by t.from_state, t.to_state)
    into allowed_pairs
    from command_transitions t;
    execute format($f$
        create function ledger_state_terminal(state text) returns boolean
        language sql immutable parallel safe as $body$ select state in (%s) $body$
    $f$, terminal_states);
    execute format($f$
        create function ledger_transition_allowed(from_state text, to_state text) returns boolean
        language sql immutable parallel safe as $body$ select (from_state, to_state) in (%s) $body$
    $f$, allowed_pairs);
end
$migration$;

comment on function ledger_state_terminal(text) is
    'Whether a state is terminal: command_states.terminal, compiled from the frozen table by migration 0013.';
comment on function ledger_transition_allowed(text, text) is
    'Whether a state change is in command_transitions, compiled from the frozen table by migration 0013.';

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
