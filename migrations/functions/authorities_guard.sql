CREATE OR REPLACE FUNCTION public.authorities_guard()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
begin
    if new.generation < old.generation then
        raise exception 'authority % generation cannot decrease (% -> %)', old.id, old.generation, new.generation
            using errcode = 'CL005';
    end if;
    new.updated_at := now();
    return new;
end;
$function$
;

grant execute on function authorities_guard() to public;
