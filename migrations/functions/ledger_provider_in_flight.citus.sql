CREATE OR REPLACE FUNCTION public.ledger_provider_in_flight(p_provider text)
 RETURNS bigint
 LANGUAGE sql
 STABLE
AS $function$
    select count(*) from provider_places p where p.provider = p_provider
$function$
;

comment on function ledger_provider_in_flight(p_provider text) is
    'How many commands of the provider group p_provider (0048) are claimed and not terminal, on every authority: what its max_in_flight bounds. On Citus (0049), the places its commands hold on the coordinator (provider_places).';

grant execute on function ledger_provider_in_flight(p_provider text) to public;
