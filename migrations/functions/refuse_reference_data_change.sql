CREATE OR REPLACE FUNCTION public.refuse_reference_data_change()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
begin
    raise exception 'table % is reference data and cannot be changed outside a migration', tg_table_name
        using errcode = 'CL004';
end;
$function$
;

grant execute on function refuse_reference_data_change() to public;
