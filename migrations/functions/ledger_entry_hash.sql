CREATE OR REPLACE FUNCTION public.ledger_entry_hash(prev_hash bytea, command_id uuid, from_state text, to_state text, at timestamp with time zone, actor text, authority_generation bigint, reason text, row_digest bytea)
 RETURNS bytea
 LANGUAGE sql
 STABLE PARALLEL SAFE
AS $function$
    select sha256(convert_to(jsonb_build_array(
        'entry-v1', encode(prev_hash, 'hex'), command_id, from_state, to_state, ledger_utc(at), actor,
        authority_generation, reason, encode(row_digest, 'hex'))::text, 'UTF8'))
$function$
;

comment on function ledger_entry_hash(prev_hash bytea, command_id uuid, from_state text, to_state text, at timestamp with time zone, actor text, authority_generation bigint, reason text, row_digest bytea) is
    'SHA-256 of the canonical text of a history entry including the previous entry''s hash: command_history.hash.';

grant execute on function ledger_entry_hash(prev_hash bytea, command_id uuid, from_state text, to_state text, at timestamp with time zone, actor text, authority_generation bigint, reason text, row_digest bytea) to public;
