CREATE OR REPLACE FUNCTION public.ledger_row_digest_v2(identity bytea, state text, generation bigint, result jsonb, error jsonb, finished_at timestamp with time zone)
 RETURNS bytea
 LANGUAGE sql
 STABLE PARALLEL SAFE
AS $function$
    select sha256(convert_to(jsonb_build_array(
        'row-v2', encode(identity, 'hex'), state, generation, result, error,
        to_char(finished_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))::text, 'UTF8'))
$function$
;

comment on function ledger_row_digest_v2(identity bytea, state text, generation bigint, result jsonb, error jsonb, finished_at timestamp with time zone) is
    'row-v2: SHA-256 of the JSON array of the identity-v2 digest (hex) and the columns a transition changes. Written by the engine steps (0030); verify accepts row-v1 or row-v2 for a command''s last entry.';

grant execute on function ledger_row_digest_v2(identity bytea, state text, generation bigint, result jsonb, error jsonb, finished_at timestamp with time zone) to public;
