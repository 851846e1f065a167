CREATE OR REPLACE FUNCTION public.commands_record_change_row()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
declare
    entry_at timestamptz := now();
    entry_actor text := ledger_actor();
    entry_reason text := coalesce(ledger_reason(),
                                  case when new.state <> old.state then new.error ->> 'reason' end,
                                  case when new.state = old.state
                                       then 'adopted by generation ' || new.authority_generation end);
    entry_digest bytea := ledger_row_digest(row(new.*)::commands);
    prev bytea;
    prev_seq integer;
    counted text[];
    count_minute timestamptz;
    count_source text;
begin
    select h.hash, h.seq into prev, prev_seq from command_history h
    where h.authority_id = new.authority_id and h.command_id = new.id
    order by h.command_id desc, h.seq desc limit 1;
    insert into command_history (authority_id, command_id, from_state, to_state, at, actor, authority_generation,
                                 reason, row_digest, prev_hash, hash, seq)
    values (new.authority_id, new.id, old.state, new.state, entry_at, entry_actor, new.authority_generation,
            entry_reason, entry_digest, prev,
            ledger_entry_hash(prev, new.id, old.state, new.state, entry_at, entry_actor, new.authority_generation,
                              entry_reason, entry_digest),
            coalesce(prev_seq, 0) + 1);
    if old.state = 'pending' and new.state <> 'pending' then
        delete from command_queue q where q.authority_id = old.authority_id and q.id = old.id;
    end if;
    if old.state = 'pending' and new.state in ('prepared', 'effect_started') then
        insert into command_in_flight (authority_id, id) values (new.authority_id, new.id);
    end if;
    if old.state in ('prepared', 'effect_started') and ledger_state_terminal(new.state) then
        delete from command_in_flight f where f.authority_id = old.authority_id and f.id = old.id;
    end if;
    -- The counts ledger_count_history() makes on one node, for this entry.
    -- Every value is computed first: the statement then names constants only.
    if new.state <> old.state and new.state in ('effect_started', 'applied', 'failed', 'ambiguous') then
        counted := array[case when new.state = 'effect_started' then 'executions' else new.state end];
        if new.state = 'applied' then
            counted := counted || ledger_latency_bucket(extract(epoch from (entry_at - new.created_at)) * 1000);
        end if;
        count_minute := date_trunc('minute', entry_at);
        count_source := 'pg:' || pg_backend_pid();
        insert into ledger_counts_by_authority (authority_id, minute, counter, source, n)
        select new.authority_id, count_minute, c.counter, count_source, 1
        from unnest(counted) as c (counter)
        on conflict (authority_id, minute, counter, source)
        do update set n = ledger_counts_by_authority.n + excluded.n;
    end if;
    -- No NOTIFY here: on a shard it would be sent on the worker, where no
    -- waiter listens, and a transaction that wrote to two nodes cannot
    -- commit after one ("cannot PREPARE a transaction that has executed
    -- LISTEN, UNLISTEN, or NOTIFY"). On Citus, waiters and custodians poll.
    return null;
end;
$function$
;

comment on function commands_record_change_row() is
    'Row-level form of commands_record_changes() (used on Citus, fired when the state or generation changes): one chained history entry, command_queue and command_in_flight follow the state, and the entry is counted in ledger_counts_by_authority as ledger_count_history() counts it on one node. No NOTIFY (it would be sent on the worker, and would stop a two-node transaction from committing): on Citus, waiters poll.';

grant execute on function commands_record_change_row() to public;
