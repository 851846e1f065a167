CREATE OR REPLACE FUNCTION public.commands_queue_follows_deadline()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
begin
    update command_queue q set deadline_at = new.deadline_at
    where q.authority_id = new.authority_id and q.id = new.id;
    return null;
end;
$function$
;

comment on function commands_queue_follows_deadline() is
    'After a pending command''s deadline_at changed: gives its queue row the new one (0038).';

grant execute on function commands_queue_follows_deadline() to public;
