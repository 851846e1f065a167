CREATE OR REPLACE FUNCTION public.ledger_resolution_hash(anchor_hash bytea, command_id uuid, outcome text, evidence text, reference text, source text, actor text, at timestamp with time zone)
 RETURNS bytea
 LANGUAGE sql
 STABLE PARALLEL SAFE
AS $function$
    select sha256(convert_to(jsonb_build_array(
        'resolution-v1', encode(anchor_hash, 'hex'), command_id, outcome, evidence, reference, source, actor,
        ledger_utc(at))::text, 'UTF8'))
$function$
;

comment on function ledger_resolution_hash(anchor_hash bytea, command_id uuid, outcome text, evidence text, reference text, source text, actor text, at timestamp with time zone) is
    'SHA-256 of the canonical text of a resolution including its anchor (the ambiguous entry''s hash).';

grant execute on function ledger_resolution_hash(anchor_hash bytea, command_id uuid, outcome text, evidence text, reference text, source text, actor text, at timestamp with time zone) to public;
