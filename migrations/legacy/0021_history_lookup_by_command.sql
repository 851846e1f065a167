-- On Citus, the row-level history trigger (0019) finds the previous entry
-- of a command by (authority_id, command_id) "order by id desc limit 1".
-- There the history's primary key is (authority_id, id), which also gives
-- that order: the planner could walk the authority's whole history
-- backwards to the command's last entry, and under SERIALIZABLE that walk
-- predicate-locks the pages every concurrent writer of the authority
-- inserts into (seen: a custodian's record transactions failing to
-- serialize eight times in a row, under a backlog of 20,000 commands).
-- Ordering by (command_id, id) names the index on (command_id, id), which
-- reads the one command's entries only.
create or replace function commands_record_change_row() returns trigger
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
    order by h.command_id desc, h.id desc limit 1;
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
