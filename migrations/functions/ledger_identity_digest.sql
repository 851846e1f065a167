CREATE OR REPLACE FUNCTION public.ledger_identity_digest(id uuid, scope uuid, idempotency_key text, request_digest bytea, digest_version integer, kind text, authority_id text, run_id text, args jsonb, canonical jsonb, created_at timestamp with time zone, deadline_at timestamp with time zone, pinned_generation bigint, intent_digest bytea, canonical_rules text[], intent_epoch integer)
 RETURNS bytea
 LANGUAGE sql
 STABLE PARALLEL SAFE
AS $function$
    select sha256(convert_to(jsonb_build_array(
        'identity-v2', id, scope, idempotency_key, encode(request_digest, 'hex'), digest_version, kind,
        authority_id, run_id, args, canonical,
        to_char(created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        to_char(deadline_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        pinned_generation, encode(intent_digest, 'hex'), canonical_rules, intent_epoch)::text, 'UTF8'))
$function$
;

comment on function ledger_identity_digest(id uuid, scope uuid, idempotency_key text, request_digest bytea, digest_version integer, kind text, authority_id text, run_id text, args jsonb, canonical jsonb, created_at timestamp with time zone, deadline_at timestamp with time zone, pinned_generation bigint, intent_digest bytea, canonical_rules text[], intent_epoch integer) is
    'identity-v2: SHA-256 of the JSON array of a command''s immutable columns (row-v1''s columns but for state, generation, result, error and finished_at).';

grant execute on function ledger_identity_digest(id uuid, scope uuid, idempotency_key text, request_digest bytea, digest_version integer, kind text, authority_id text, run_id text, args jsonb, canonical jsonb, created_at timestamp with time zone, deadline_at timestamp with time zone, pinned_generation bigint, intent_digest bytea, canonical_rules text[], intent_epoch integer) to public;
