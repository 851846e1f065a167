-- Commands in time and in order of importance.
--
-- A command may carry `not_before` (it is not claimed before that instant)
-- and has a `priority` (-100..100, higher first within an authority). Both
-- are fixed when the command is recorded. The queue orders by one number
-- per command, its claim rank (`ledger_claim_rank`): the millisecond it
-- became claimable (its `created_at`, or `not_before` when later), less
-- 10 s per level of priority; ties go by id. So priority ages in: a command
-- is overtaken only by higher priorities that became claimable less than
-- their lead x 10 s after it (src/domain/schedule.rs, which computes the
-- same rank; the tests compare the two).
--
-- The claim reads the queue in (authority_id, rank, id) order, skipping
-- rows whose `ready_at` (their `not_before`) is still ahead. For a command
-- with neither, the rank is the millisecond it was recorded: the order of
-- arrival, as before (which went by the id, minted just before). The primary key stays (authority_id, id): the triggers delete a
-- queue row by its id when the command leaves `pending`.
--
-- Not in the history's row digest (ledger_row_digest), as retry_of is not:
-- they decide when and in what order a command is claimed, not what it does
-- or what happened to it; the guard keeps both immutable.

alter table commands add column not_before timestamptz;
alter table commands add column priority smallint not null default 0;
alter table commands add constraint commands_priority_in_range check (priority between -100 and 100);
alter table commands add constraint commands_deadline_after_not_before
    check (not_before is null or deadline_at is null or deadline_at > not_before);

comment on column commands.not_before is
    'The command is not claimed before this instant (null: as soon as possible). Fixed when recorded.';
comment on column commands.priority is
    'Higher is claimed first within an authority, with aging (see ledger_claim_rank): -100 to 100, the kind''s '
    'priority unless the command asked for another within the kind''s max_priority. Fixed when recorded.';

alter table holds add column not_before timestamptz;
alter table holds add column priority smallint not null default 0;
alter table holds add constraint holds_priority_in_range check (priority between -100 and 100);

comment on column holds.not_before is 'not_before of the held request, carried to the command on release.';
comment on column holds.priority is 'Priority of the held request, carried to the command on release.';

create function ledger_claim_rank(created_at timestamptz, not_before timestamptz, priority smallint) returns bigint
language sql immutable parallel safe as $$
    select floor(extract(epoch from greatest(created_at, not_before) at time zone 'UTC') * 1000)::bigint
           - priority::bigint * 10000
$$;

comment on function ledger_claim_rank(timestamptz, timestamptz, smallint) is
    'The claim rank of a queued command: the millisecond it became claimable (recorded, or not_before when '
    'later) less 10,000 per level of priority. Lower is claimed first; ties by id (src/domain/schedule.rs).';

-- The queue's order and schedule. Existing rows: recorded with no schedule
-- and priority 0, their rank is the millisecond they were recorded.
alter table command_queue add column rank bigint;
alter table command_queue add column ready_at timestamptz;
alter table command_queue disable trigger user;
update command_queue q set rank = ledger_claim_rank(c.created_at, null, 0::smallint)
from commands c where c.authority_id = q.authority_id and c.id = q.id;
alter table command_queue enable trigger user;
alter table command_queue alter column rank set not null;
create index command_queue_claim_order on command_queue (authority_id, rank, id);
-- When the next scheduled command of an authority falls due (the custodian
-- sleeps until then); commands without a schedule have no entry here.
create index command_queue_scheduled on command_queue (authority_id, ready_at) where ready_at is not null;

comment on column command_queue.rank is
    'ledger_claim_rank of the command: the claim takes an authority''s lowest ranks first (ties: oldest id).';
comment on column command_queue.ready_at is
    'The command''s not_before (null: claimable now); the claim skips rows whose time is ahead.';

-- The queue's rows carry their rank: the statement-level insert trigger
-- (one node; 0025's body otherwise unchanged) ...
create or replace function commands_record_inserts() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp
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
               ledger_row_digest(n::commands) as row_digest
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

-- ... and the row-level one (Citus; 0019's body otherwise unchanged).
create or replace function commands_record_insert_row() returns trigger
language plpgsql security definer set search_path = public, pg_temp as $$
declare
    entry_at timestamptz := now();
    entry_actor text := coalesce((select a.actor from ledger_actors() a where a.command_id = new.id), ledger_actor());
    entry_reason text := ledger_reason();
    entry_digest bytea := ledger_row_digest(row(new.*)::commands);
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

-- The guard (0013's body) also keeps not_before and priority as recorded.
create or replace function commands_guard() returns trigger
language plpgsql security definer set search_path = public, pg_temp as $$
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

-- The hold guard (0004's body) too, for the request's schedule and priority.
create or replace function holds_guard() returns trigger
language plpgsql security definer set search_path = public, pg_temp as $$
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
