CREATE OR REPLACE FUNCTION public.commands_record_changes()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
 SET enable_seqscan TO 'off'
 SET enable_hashjoin TO 'off'
 SET enable_mergejoin TO 'off'
AS $function$
declare
    dequeued_authorities text[];
    dequeued_ids uuid[];
    claimed_authorities text[];
    claimed_ids uuid[];
    landed_authorities text[];
    landed_ids uuid[];
    finished_ids uuid[];
    part record;
begin
    with paired as materialized (
        select s.id,
               min(s.authority_id) filter (where not s.old) as authority_id,
               min(s.state) filter (where s.old) as from_state,
               min(s.state) filter (where not s.old) as to_state,
               min(s.authority_generation) filter (where s.old) as from_generation,
               min(s.authority_generation) filter (where not s.old) as to_generation,
               (array_agg(s.r) filter (where not s.old))[1] as r
        from (
            select true as old, o.id, o.authority_id, o.state, o.authority_generation, null::commands as r
            from old_rows o
            union all
            select false, n.id, n.authority_id, n.state, n.authority_generation, n::commands
            from new_rows n
        ) s
        group by s.id
    ),
    entries as (
        insert into command_history (authority_id, command_id, from_state, to_state, at, actor, authority_generation,
                                     reason, row_digest, prev_hash, hash, seq)
        select e.authority_id, e.id, e.from_state, e.to_state, e.at, e.actor, e.authority_generation, e.reason,
               e.row_digest, e.prev_hash,
               ledger_entry_hash(e.prev_hash, e.id, e.from_state, e.to_state, e.at, e.actor,
                                 e.authority_generation, e.reason, e.row_digest),
               coalesce(e.prev_seq, 0) + 1
        from (
            select p.authority_id, p.id, p.from_state, p.to_state, now() as at, ledger_actor() as actor,
                   p.to_generation as authority_generation,
                   coalesce(ledger_reason(),
                            case when p.to_state <> p.from_state then (p.r).error ->> 'reason' end,
                            case when p.to_state = p.from_state then 'adopted by generation ' || p.to_generation end)
                       as reason,
                   ledger_row_digest(p.r) as row_digest,
                   last.hash as prev_hash, last.seq as prev_seq
            from paired p
            left join lateral (select h.hash, h.seq from command_history h where h.command_id = p.id
                               order by h.command_id desc, h.seq desc limit 1) last on true
            where p.to_state <> p.from_state or p.to_generation is distinct from p.from_generation
            offset 0 -- evaluated once per row: see the head of this file
        ) e
        order by e.id
    )
    select array_agg(p.authority_id) filter (where p.from_state = 'pending' and p.to_state <> 'pending'),
           array_agg(p.id) filter (where p.from_state = 'pending' and p.to_state <> 'pending'),
           array_agg(p.authority_id) filter (where p.from_state = 'pending'
                                                and p.to_state in ('prepared', 'effect_started')),
           array_agg(p.id) filter (where p.from_state = 'pending' and p.to_state in ('prepared', 'effect_started')),
           array_agg(p.authority_id) filter (where p.from_state in ('prepared', 'effect_started')
                                                and ledger_state_terminal(p.to_state)),
           array_agg(p.id) filter (where p.from_state in ('prepared', 'effect_started')
                                      and ledger_state_terminal(p.to_state)),
           array_agg(p.id) filter (where p.to_state <> p.from_state and ledger_state_terminal(p.to_state))
    into dequeued_authorities, dequeued_ids, claimed_authorities, claimed_ids, landed_authorities, landed_ids,
         finished_ids
    from paired p;

    -- Left pending: out of the queue (a claim, a cancel, an expiry),
    -- each row reached by its key (migration 0035 says why).
    if dequeued_ids is not null then
        delete from command_queue q
        using unnest(dequeued_authorities, dequeued_ids) as u (authority_id, id)
        where q.authority_id = u.authority_id and q.id = u.id;
    end if;

    -- Claimed: in flight until terminal.
    if claimed_ids is not null then
        insert into command_in_flight (authority_id, id)
        select u.authority_id, u.id from unnest(claimed_authorities, claimed_ids) as u (authority_id, id);
    end if;

    for part in
        select u.authority_id, array_agg(u.id) as ids
        from unnest(landed_authorities, landed_ids) as u (authority_id, id)
        group by u.authority_id
    loop
        delete from command_in_flight f where f.authority_id = part.authority_id and f.id = any(part.ids);
    end loop;

    perform pg_notify('command_ledger_outcome', u.id::text) from unnest(finished_ids) as u (id);
    return null;
end;
$function$
;

comment on function commands_record_changes() is
    'After each update statement on commands (one node): a chained history entry for every row whose state or authority generation changed, the rows that left pending out of command_queue, the claimed ones into command_in_flight until terminal, and a NOTIFY command_ledger_outcome for each that became terminal. Old and new rows are paired by grouping, never by a join of the transition tables, and the two small tables are changed by key: linear in the rows changed, whatever the statistics (0023). Each entry''s row digest and previous hash are computed once (0025).';

grant execute on function commands_record_changes() to public;
