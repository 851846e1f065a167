CREATE OR REPLACE FUNCTION public.refuse_commands_truncate()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
begin
    raise exception 'commands are deleted only by prune_commands(), which archives them first'
        using errcode = 'CL002';
end;
$function$
;

comment on function refuse_commands_truncate() is
    'Refuses truncate on commands: a command leaves the ledger only through prune_commands(), archived.';

grant execute on function refuse_commands_truncate() to public;
