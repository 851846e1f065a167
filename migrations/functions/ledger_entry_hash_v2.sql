CREATE OR REPLACE FUNCTION public.ledger_entry_hash_v2(prev_hash bytea, command_id uuid, from_state text, through text, to_state text, at timestamp with time zone, actor text, authority_generation bigint, reason text, row_digest bytea)
 RETURNS bytea
 LANGUAGE sql
 STABLE PARALLEL SAFE
AS $function$
    select sha256(convert_to(jsonb_build_array(
        'entry-v2', encode(prev_hash, 'hex'), command_id, from_state, through, to_state, ledger_utc(at), actor,
        authority_generation, reason, encode(row_digest, 'hex'))::text, 'UTF8'))
$function$
;

comment on function ledger_entry_hash_v2(prev_hash bytea, command_id uuid, from_state text, through text, to_state text, at timestamp with time zone, actor text, authority_generation bigint, reason text, row_digest bytea) is
    'entry-v2 (0045): SHA-256 of the canonical text of a history entry that names the state it passed through (command_history.through), including the previous entry''s hash: command_history.hash of such an entry. Entries without it are entry-v1 (ledger_entry_hash).';

grant execute on function ledger_entry_hash_v2(prev_hash bytea, command_id uuid, from_state text, through text, to_state text, at timestamp with time zone, actor text, authority_generation bigint, reason text, row_digest bytea) to public;
