CREATE OR REPLACE FUNCTION public.ledger_next_attempt(p_authority text, p_id uuid, p_retry_in double precision, p_retry_within double precision)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
begin
    -- On Citus the engine writes no next attempt yet: a kind's retry
    -- policy has no effect here (the custodian says so at start and drops
    -- it), and a failure with nothing done is its command's outcome.
    return false;
end;
$function$
;

alter function ledger_next_attempt(p_authority text, p_id uuid, p_retry_in double precision, p_retry_within double precision) owner to ledger_engine;

comment on function ledger_next_attempt(p_authority text, p_id uuid, p_retry_in double precision, p_retry_within double precision) is
    'Engine step (0046; Citus): writes no next attempt and returns false. On one node it writes the next attempt of a failure with nothing done.';

revoke all on function ledger_next_attempt(p_authority text, p_id uuid, p_retry_in double precision, p_retry_within double precision) from public;
grant execute on function ledger_next_attempt(p_authority text, p_id uuid, p_retry_in double precision, p_retry_within double precision) to ledger_custodian;
