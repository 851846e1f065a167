CREATE OR REPLACE FUNCTION public.commands_guard_delete()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
begin
    if not exists (select 1 from pruned_commands where authority_id = old.authority_id and id = old.id) then
        raise exception 'command % is deleted only by prune_commands(), which archives it first', old.id
            using errcode = 'CL002';
    end if;
    return old;
end;
$function$
;

grant execute on function commands_guard_delete() to public;
