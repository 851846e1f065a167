CREATE OR REPLACE FUNCTION public.refuse_provider_change()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
begin
    if tg_table_name = 'provider_places' then
        raise exception 'provider_places is written by the claims and the records of the custodians (0049): nothing else takes or frees a place'
            using errcode = 'CL017';
    end if;
    raise exception '% is written by the custodian from its catalog ([providers.<name>]) when it starts; change the catalog instead', tg_table_name
        using errcode = 'CL017';
end;
$function$
;

comment on function refuse_provider_change() is
    'Refuses a statement on provider_limits or provider_kinds that does not come from the engine step ledger_set_providers (0048), on authority_provider_kinds that does not come from ledger_regroup_authority, or on provider_places that does not come from ledger_provider_hold or ledger_provider_release (0049), and any truncation of provider_limits, provider_kinds or provider_places.';

grant execute on function refuse_provider_change() to public;
