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
    entry_provider text;
begin
    insert into command_history (authority_id, command_id, from_state, to_state, at, actor, authority_generation,
                                 reason, row_digest, prev_hash, hash, seq)
    values (new.authority_id, new.id, null, new.state, entry_at, entry_actor, new.authority_generation,
            entry_reason, entry_digest, null,
            ledger_entry_hash(null, new.id, null, new.state, entry_at, entry_actor, new.authority_generation,
                              entry_reason, entry_digest),
            1);
    -- The queue row takes its kind's provider group at this authority
    -- (0049: on the authority's own shard on Citus), read first: Citus
    -- takes no subquery in an INSERT's values.
    select k.provider into entry_provider from authority_provider_kinds k
    where k.authority_id = new.authority_id and k.kind = new.kind;
    insert into command_queue (authority_id, id, rank, ready_at, deadline_at, provider)
    values (new.authority_id, new.id, ledger_claim_rank(new.created_at, new.not_before, new.priority), new.not_before,
            new.deadline_at, entry_provider);
    return null;
end;
$function$
;

comment on function commands_record_insert_row() is
    'Row-level form of commands_record_inserts() (used on Citus): the new command''s first history entry and its place in command_queue, under its kind''s provider group at its authority (authority_provider_kinds, 0049).';

grant execute on function commands_record_insert_row() to public;
