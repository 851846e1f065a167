CREATE OR REPLACE FUNCTION public.refuse_resolution_change()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
begin
    raise exception 'command_resolutions is append-only'
        using errcode = 'CL003';
end;
$function$
;

comment on function refuse_resolution_change() is
    'Refuses update, delete and truncate on command_resolutions: a recorded resolution is evidence.';

grant execute on function refuse_resolution_change() to public;
