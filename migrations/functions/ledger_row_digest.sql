CREATE OR REPLACE FUNCTION public.ledger_row_digest(c commands)
 RETURNS bytea
 LANGUAGE sql
 STABLE PARALLEL SAFE
AS $function$
    select sha256(convert_to(jsonb_build_array(
        'row-v1', c.id, c.scope, c.idempotency_key, encode(c.request_digest, 'hex'), c.digest_version,
        c.kind, c.authority_id, c.authority_generation, c.run_id, c.args, c.canonical, c.state,
        c.result, c.error, ledger_utc(c.created_at), ledger_utc(c.deadline_at), ledger_utc(c.finished_at),
        c.pinned_generation, encode(c.intent_digest, 'hex'), c.canonical_rules, c.intent_epoch)::text, 'UTF8'))
$function$
;

comment on function ledger_row_digest(c commands) is
    'SHA-256 of the canonical text of a command row (every column but updated_at), as stored in command_history.row_digest.';

grant execute on function ledger_row_digest(c commands) to public;
