CREATE OR REPLACE FUNCTION public.ledger_provider_release(p_authority text, p_ids uuid[])
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
declare
    released bigint := 0;
begin
    -- The places of p_authority's commands p_ids: their outcomes are
    -- recorded, or a custodian found them no longer in flight.
    delete from provider_places p
    where p.authority_id = p_authority and p.command_id = any(p_ids);
    get diagnostics released = row_count;
    return released;
end;
$function$
;

alter function ledger_provider_release(p_authority text, p_ids uuid[]) owner to ledger_engine;

comment on function ledger_provider_release(p_authority text, p_ids uuid[]) is
    'Engine step (0049; Citus, on the coordinator): frees the places (provider_places) of p_authority''s commands p_ids, once their outcomes are recorded or a custodian found them no longer in flight. Returns how many it freed.';

revoke all on function ledger_provider_release(p_authority text, p_ids uuid[]) from public;
grant execute on function ledger_provider_release(p_authority text, p_ids uuid[]) to ledger_custodian;
