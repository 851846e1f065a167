CREATE OR REPLACE FUNCTION public.refuse_history_change()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
begin
    raise exception 'command_history is append-only'
        using errcode = 'CL003';
end;
$function$
;

grant execute on function refuse_history_change() to public;
