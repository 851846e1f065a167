CREATE OR REPLACE FUNCTION public.commands_retry_of_immutable()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
begin
    raise exception 'command % retry_of is immutable', old.id
        using errcode = 'CL003';
end;
$function$
;

comment on function commands_retry_of_immutable() is
    'Refuses any change of commands.retry_of after insert.';

grant execute on function commands_retry_of_immutable() to public;
