CREATE OR REPLACE FUNCTION public.ledger_claim_start_authority(p_authority text, p_holder text, p_limit integer)
 RETURNS SETOF commands
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
            select * from ledger_claim_start(array[p_authority], p_holder, p_limit)
        $function$
;

alter function ledger_claim_start_authority(p_authority text, p_holder text, p_limit integer) owner to ledger_engine;

comment on function ledger_claim_start_authority(p_authority text, p_holder text, p_limit integer) is
    'Engine step (0033): ledger_claim_start for the one authority p_authority. On Citus it runs on the worker holding the authority''s shards (delegated by ledger_delegate_engine_steps()), in single-table statements; on one node it is ledger_claim_start(array[p_authority], ...).';

revoke all on function ledger_claim_start_authority(p_authority text, p_holder text, p_limit integer) from public;
grant execute on function ledger_claim_start_authority(p_authority text, p_holder text, p_limit integer) to ledger_custodian;
