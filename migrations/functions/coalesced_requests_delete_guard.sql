CREATE OR REPLACE FUNCTION public.coalesced_requests_delete_guard()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
begin
    if exists (select 1 from commands where authority_id = old.authority_id and id = old.command_id) then
        raise exception 'coalesced_requests is append-only'
            using errcode = 'CL003';
    end if;
    return old;
end;
$function$
;

grant execute on function coalesced_requests_delete_guard() to public;
