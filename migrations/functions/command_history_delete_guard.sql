CREATE OR REPLACE FUNCTION public.command_history_delete_guard()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
begin
    if exists (select 1 from commands where authority_id = old.authority_id and id = old.command_id) then
        raise exception 'command_history is append-only'
            using errcode = 'CL003';
    end if;
    return old;
end;
$function$
;

grant execute on function command_history_delete_guard() to public;
