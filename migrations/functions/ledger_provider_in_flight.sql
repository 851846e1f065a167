CREATE OR REPLACE FUNCTION public.ledger_provider_in_flight(p_provider text)
 RETURNS bigint
 LANGUAGE sql
 STABLE
AS $function$
    select count(*) from command_in_flight f
    join commands c on c.authority_id = f.authority_id and c.id = f.id
    join provider_kinds k on k.kind = c.kind
    where k.provider = p_provider
$function$
;

comment on function ledger_provider_in_flight(p_provider text) is
    'How many commands of the provider group p_provider (0048) are claimed and not terminal, on every authority: what its max_in_flight bounds.';

grant execute on function ledger_provider_in_flight(p_provider text) to public;
