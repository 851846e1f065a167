CREATE OR REPLACE FUNCTION public.refuse_direct_work_change()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
begin
    if pg_trigger_depth() < 2 then
        raise exception '% is written only by the triggers of commands; change the command instead', tg_table_name
            using errcode = 'CL008';
    end if;
    return null;
end;
$function$
;

comment on function refuse_direct_work_change() is
    'Refuses a statement on command_queue or command_in_flight that does not come from a trigger of commands.';

grant execute on function refuse_direct_work_change() to public;
