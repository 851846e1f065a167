CREATE OR REPLACE FUNCTION public.refuse_archive_change()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
begin
    raise exception 'pruned_commands is append-only'
        using errcode = 'CL003';
end;
$function$
;

grant execute on function refuse_archive_change() to public;
