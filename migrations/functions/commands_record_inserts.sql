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

    insert into command_queue (authority_id, id, rank, ready_at, deadline_at, provider)
    select n.authority_id, n.id, ledger_claim_rank(n.created_at, n.not_before, n.priority), n.not_before, n.deadline_at,
           k.provider
    from new_rows n
    left join provider_kinds k on k.kind = n.kind;
    return null;
end;
$function$
;

comment on function commands_record_inserts() is
    'After each insert statement on commands: each new command''s first history entry (the head of its hash chain, its row digest computed once: 0025) and its place in command_queue, under its kind''s provider group if it has one (provider_kinds, 0048).';

grant execute on function commands_record_inserts() to public;
