CREATE OR REPLACE FUNCTION public.ledger_set_providers(p_providers jsonb)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
begin
    -- On Citus no provider limit is held yet: the claim is the workers',
    -- and the limits' rows are the coordinator's (0048).
    if jsonb_array_length(p_providers) > 0 then
        raise exception 'limits per provider are not held on Citus yet'
            using errcode = '0A000', hint = 'remove the [providers] sections from the catalog, or run on one node';
    end if;
    return 0;
end;
$function$
;

alter function ledger_set_providers(p_providers jsonb) owner to ledger_engine;

comment on function ledger_set_providers(p_providers jsonb) is
    'Engine step (0048; Citus): refuses any provider group (limits per provider are held on one node only) and writes nothing.';

revoke all on function ledger_set_providers(p_providers jsonb) from public;
grant execute on function ledger_set_providers(p_providers jsonb) to ledger_custodian;
