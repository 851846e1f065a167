CREATE OR REPLACE FUNCTION public.refuse_provider_change()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
begin
    raise exception '% is written by the custodian from its catalog ([providers.<name>]) when it starts; change the catalog instead', tg_table_name
        using errcode = 'CL017';
end;
$function$
;

comment on function refuse_provider_change() is
    'Refuses a statement on provider_limits or provider_kinds that does not come from the engine step ledger_set_providers (0048), and any truncation of them.';

grant execute on function refuse_provider_change() to public;
