-- A ledger that can be distributed by authority (Citus).
--
-- On one node nothing changes in behaviour: history entries carry their
-- command's authority, and the guards that look at another table name the
-- authority. On a Citus coordinator, `ledger_distribute()` (run by `migrate`
-- after the migrations when the citus extension is present) distributes the
-- tables listed in `ledger_distribution`, in order: the per-authority tables
-- by authority, co-located, the small tables as reference tables.
--
-- What was found by running the ledger's schema on a 3-node Citus 13.2
-- cluster (docs/SCALING.md has the whole list):
--   * row-level triggers propagate to every shard (citus.enable_unsafe_triggers)
--     and may write co-located shards of other tables when they name the same
--     authority: the guard, the append-only and kept-table refusals, the
--     reference-data freeze and the hash chain all hold;
--   * statement-level triggers with transition tables do not (a statement on
--     a shard cannot read "new_rows" through a distributed query: "executor
--     could not find named tuplestore"), so on Citus the history, queue and
--     in-flight bookkeeping of `commands` runs as row-level triggers
--     (commands_record_insert_row / commands_record_change_row below), the
--     same rules row by row;
--   * a trigger on a shard may only query other tables for the same
--     authority ("cannot execute a distributed query from a query on a
--     shard" otherwise): the delete guards now name it;
--   * a shard's row has the shard's type, not `commands`: the row-level
--     functions pass `row(new.*)::commands` to ledger_row_digest;
--   * a unique constraint must contain the distribution column: the
--     distribution step rekeys the tables on (authority_id, ...).

-------------------------------------------------------------------------------
-- History entries carry their command's authority (the distribution column).
-------------------------------------------------------------------------------

alter table command_history add column authority_id text;

alter table command_history disable trigger command_history_append_only;
update command_history h set authority_id = c.authority_id from commands c where c.id = h.command_id;
alter table command_history enable trigger command_history_append_only;

alter table command_history alter column authority_id set not null;

comment on column command_history.authority_id is
    'The authority of the command (commands.authority_id), copied by the commands triggers: '
    'the column the ledger is distributed by, so an entry lives on its command''s shard.';

create or replace function commands_record_changes() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp
    AS $$
begin
    insert into command_history (authority_id, command_id, from_state, to_state, at, actor, authority_generation, reason,
                                 row_digest, prev_hash, hash)
    select e.authority_id, e.id, e.from_state, e.to_state, e.at, e.actor, e.authority_generation, e.reason,
           e.row_digest, e.prev_hash,
           ledger_entry_hash(e.prev_hash, e.id, e.from_state, e.to_state, e.at, e.actor,
                             e.authority_generation, e.reason, e.row_digest)
    from (
        select n.authority_id, n.id, o.state as from_state, n.state as to_state, now() as at, ledger_actor() as actor,
               n.authority_generation,
               coalesce(ledger_reason(),
                        case when n.state <> o.state then n.error ->> 'reason' end,
                        case when n.state = o.state then 'adopted by generation ' || n.authority_generation end)
                   as reason,
               ledger_row_digest(n::commands) as row_digest,
               -- By command alone, as before 0019: this statement-level form
               -- runs on one node only, where a command id is unique (Citus
               -- runs the row-level form below).
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
    ) e
    order by e.id;

    insert into command_queue (authority_id, id)
    select n.authority_id, n.id from new_rows n;
    return null;
end;
$$;


-------------------------------------------------------------------------------
-- The same bookkeeping, row by row: the form that runs on a Citus shard (a
-- statement-level trigger there cannot read its transition tables). Unused on
-- one node; ledger_distribute() swaps them in on a coordinator.
-------------------------------------------------------------------------------

create function commands_record_insert_row() returns trigger
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
    insert into command_queue (authority_id, id) values (new.authority_id, new.id);
    return null;
end;
$$;

create function commands_record_change_row() returns trigger
language plpgsql security definer set search_path = public, pg_temp as $$
declare
    entry_at timestamptz := now();
    entry_actor text := ledger_actor();
    entry_reason text := coalesce(ledger_reason(),
                                  case when new.state <> old.state then new.error ->> 'reason' end,
                                  case when new.state = old.state
                                       then 'adopted by generation ' || new.authority_generation end);
    entry_digest bytea := ledger_row_digest(row(new.*)::commands);
    prev bytea;
begin
    select h.hash into prev from command_history h
    where h.authority_id = new.authority_id and h.command_id = new.id
    order by h.id desc limit 1;
    insert into command_history (authority_id, command_id, from_state, to_state, at, actor, authority_generation,
                                 reason, row_digest, prev_hash, hash)
    values (new.authority_id, new.id, old.state, new.state, entry_at, entry_actor, new.authority_generation,
            entry_reason, entry_digest, prev,
            ledger_entry_hash(prev, new.id, old.state, new.state, entry_at, entry_actor, new.authority_generation,
                              entry_reason, entry_digest));
    if old.state = 'pending' and new.state <> 'pending' then
        delete from command_queue q where q.authority_id = old.authority_id and q.id = old.id;
    end if;
    if old.state = 'pending' and new.state in ('prepared', 'effect_started') then
        insert into command_in_flight (authority_id, id) values (new.authority_id, new.id);
    end if;
    if old.state in ('prepared', 'effect_started') and ledger_state_terminal(new.state) then
        delete from command_in_flight f where f.authority_id = old.authority_id and f.id = old.id;
    end if;
    -- No NOTIFY here: on a shard it would be sent on the worker, where no
    -- waiter listens, and a transaction that wrote to two nodes cannot
    -- commit after one ("cannot PREPARE a transaction that has executed
    -- LISTEN, UNLISTEN, or NOTIFY"). On Citus, waiters and custodians poll.
    return null;
end;
$$;

comment on function commands_record_insert_row() is
    'Row-level form of commands_record_inserts() (used on Citus): the new command''s first history entry and its place in command_queue.';
comment on function commands_record_change_row() is
    'Row-level form of commands_record_changes() (used on Citus, fired when the state or generation changes): '
    'one chained history entry, command_queue and command_in_flight follow the state. No NOTIFY (it would be sent '
    'on the worker, and would stop a two-node transaction from committing): on Citus, waiters poll.';

-------------------------------------------------------------------------------
-- Guards that look at another table name the authority: on Citus that keeps
-- the lookup on the shard group of the row being deleted.
-------------------------------------------------------------------------------

create or replace function commands_guard_delete() returns trigger
language plpgsql security definer set search_path = public, pg_temp as $$
begin
    if not exists (select 1 from pruned_commands where authority_id = old.authority_id and id = old.id) then
        raise exception 'command % is deleted only by prune_commands(), which archives it first', old.id
            using errcode = 'CL002';
    end if;
    return old;
end;
$$;

create or replace function command_history_delete_guard() returns trigger
language plpgsql security definer set search_path = public, pg_temp as $$
begin
    if exists (select 1 from commands where authority_id = old.authority_id and id = old.command_id) then
        raise exception 'command_history is append-only'
            using errcode = 'CL003';
    end if;
    return old;
end;
$$;

create or replace function coalesced_requests_delete_guard() returns trigger
language plpgsql security definer set search_path = public, pg_temp as $$
begin
    if exists (select 1 from commands where authority_id = old.authority_id and id = old.command_id) then
        raise exception 'coalesced_requests is append-only'
            using errcode = 'CL003';
    end if;
    return old;
end;
$$;

-------------------------------------------------------------------------------
-- How each table is laid out on Citus: data, so that a later migration adding
-- a table adds a row here (and, on a database already distributed, the next
-- `migrate` distributes it).
-------------------------------------------------------------------------------

create table ledger_distribution (
    position int primary key,
    table_name text not null unique,
    method text not null check (method in ('reference', 'distributed')),
    distribution_column text,
    colocate_with text,
    rekey text[] not null default '{}',
    check ((method = 'distributed') = (distribution_column is not null))
);

comment on table ledger_distribution is
    'How ledger_distribute() lays each table out on a Citus cluster, in position order: reference tables are copied '
    'to every node; distributed tables are split by distribution_column and co-located with colocate_with. '
    'A later migration adding a table adds its row here.';
comment on column ledger_distribution.position is
    'Order of distribution: a reference table before the tables that refer to it, a table before those co-located with it.';
comment on column ledger_distribution.table_name is 'The table.';
comment on column ledger_distribution.method is 'reference (a full copy on every node) or distributed (hash-partitioned).';
comment on column ledger_distribution.distribution_column is
    'For a distributed table: the column its rows are placed by (an authority).';
comment on column ledger_distribution.colocate_with is
    'For a distributed table: the table whose shards its shards sit beside (null: a co-location group of its own).';
comment on column ledger_distribution.rekey is
    'Statements run on the coordinator just before the table is distributed: a unique key or a foreign key on '
    'Citus must contain the distribution column.';

insert into ledger_distribution (position, table_name, method, distribution_column, colocate_with, rekey) values
    (10, 'command_states', 'reference', null, null, '{}'),
    (11, 'command_transitions', 'reference', null, null, '{}'),
    (12, 'fleets', 'reference', null, null, '{}'),
    (13, 'principals', 'reference', null, null, '{}'),
    (14, 'api_tokens', 'reference', null, null, '{}'),
    (20, 'authorities', 'distributed', 'id', null, '{}'),
    (21, 'commands', 'distributed', 'authority_id', 'authorities', array[
        'alter table commands drop constraint commands_pkey cascade',
        'alter table commands add constraint commands_pkey primary key (authority_id, id)',
        'alter table commands drop constraint commands_scope_key_unique',
        'alter table commands add constraint commands_scope_key_unique unique (authority_id, scope, idempotency_key)',
        'drop index commands_scope_intent_epoch_unique',
        'create unique index commands_scope_intent_epoch_unique on commands (authority_id, scope, intent_digest, intent_epoch) where intent_epoch is not null',
        'drop trigger commands_record_inserts on commands',
        'drop trigger commands_record_changes on commands',
        'create trigger commands_record_inserts after insert on commands for each row execute function commands_record_insert_row()',
        'create trigger commands_record_changes after update on commands for each row when (new.state is distinct from old.state or new.authority_generation is distinct from old.authority_generation) execute function commands_record_change_row()'
    ]),
    (22, 'command_history', 'distributed', 'authority_id', 'commands', array[
        'alter table command_history drop constraint command_history_pkey',
        'alter table command_history add constraint command_history_pkey primary key (authority_id, id)',
        'alter table command_history add constraint command_history_command_id_fkey foreign key (authority_id, command_id) references commands (authority_id, id) on delete cascade',
        -- The per-minute counts (0017) are a table of the coordinator's; a
        -- shard's trigger cannot write it, so on Citus executions are not
        -- counted there yet (docs/SCALING.md).
        'drop trigger if exists command_history_counts on command_history'
    ]),
    (23, 'command_queue', 'distributed', 'authority_id', 'commands', '{}'),
    (24, 'command_in_flight', 'distributed', 'authority_id', 'commands', '{}'),
    (25, 'holds', 'distributed', 'authority_id', 'commands', array[
        'alter table holds drop constraint holds_pkey',
        'alter table holds add constraint holds_pkey primary key (authority_id, id)',
        'drop index holds_open_request_unique',
        'create unique index holds_open_request_unique on holds (authority_id, scope, request_digest) where state = ''open''',
        'alter table holds add constraint holds_command_id_fkey foreign key (authority_id, command_id) references commands (authority_id, id)',
        'alter table holds add constraint holds_resembles_fkey foreign key (authority_id, resembles) references commands (authority_id, id)'
    ]),
    (26, 'coalesced_requests', 'distributed', 'authority_id', 'commands', array[
        'alter table coalesced_requests add constraint coalesced_requests_command_id_fkey foreign key (authority_id, command_id) references commands (authority_id, id) on delete cascade'
    ]),
    (27, 'pruned_commands', 'distributed', 'authority_id', 'commands', array[
        'alter table pruned_commands drop constraint pruned_commands_pkey',
        'alter table pruned_commands add constraint pruned_commands_pkey primary key (authority_id, id)'
    ]);

-------------------------------------------------------------------------------
-- The distribution step. Idempotent: tables already distributed are left
-- alone, so it runs after every `migrate` on a coordinator.
-------------------------------------------------------------------------------

create function ledger_distribute() returns int
language plpgsql security definer set search_path = public, pg_temp as $$
declare
    t record;
    f regprocedure;
    done int := 0;
begin
    if not exists (select 1 from pg_extension where extname = 'citus') then
        raise exception 'ledger_distribute() needs a Citus coordinator (create extension citus; add the workers)'
            using errcode = 'CL013';
    end if;
    -- Every process migrates when it starts: one distributes, the others
    -- then find the work done.
    perform pg_advisory_xact_lock(7242019);
    -- Row-level triggers of a distributed table run on its shards.
    set local citus.enable_unsafe_triggers = on;
    for t in select * from ledger_distribution order by position loop
        if to_regclass(t.table_name) is null
           or exists (select 1 from pg_dist_partition p
                      where p.logicalrelid = t.table_name::regclass
                        and case t.method when 'reference' then p.repmodel = 't' else p.partmethod = 'h' end) then
            continue;
        end if;
        -- A table with a foreign key to a reference table may already be a
        -- "Citus local table" (Citus converts it when the referenced table is
        -- distributed first): create_reference_table takes it from there.
        for i in 1 .. coalesce(array_length(t.rekey, 1), 0) loop
            execute t.rekey[i];
        end loop;
        -- The copy into the shards would trip the tables' own refusals (the
        -- frozen reference data refuses every insert).
        execute format('alter table %I disable trigger user', t.table_name);
        if t.method = 'reference' then
            perform create_reference_table(t.table_name::regclass);
        else
            perform create_distributed_table(t.table_name::regclass, t.distribution_column,
                                             colocate_with => coalesce(t.colocate_with, 'none'));
        end if;
        execute format('alter table %I enable trigger user', t.table_name);
        done := done + 1;
    end loop;
    -- Functions created before any table was distributed exist only on the
    -- coordinator: the shards' triggers call them on the workers. (After the
    -- tables: a function of a table's row type needs its table distributed.)
    for f in
        select p.oid::regprocedure from pg_proc p
        where p.pronamespace = 'public'::regnamespace
          and not exists (select 1 from pg_depend d where d.objid = p.oid and d.deptype = 'e')
          and not exists (select 1 from pg_dist_object o where o.classid = 'pg_proc'::regclass and o.objid = p.oid)
    loop
        perform create_distributed_function(f);
    end loop;
    return done;
end;
$$;

comment on function ledger_distribute() is
    'On a Citus coordinator: distributes every table of ledger_distribution not distributed yet (rekeying it first), '
    'and makes the ledger''s functions known to the workers. Returns how many tables it distributed. Idempotent.';

-- Roles (0016): every function above runs as the owner with a pinned
-- search_path, like the ones it replaces; the layout is the owner's to run.
revoke all on function ledger_distribute() from public;
grant select on ledger_distribution to ledger_inspector;
