CREATE OR REPLACE FUNCTION public.commands_history_leaves()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
begin
    delete from command_history h
    using old_rows o
    where h.authority_id = o.authority_id and h.command_id = o.id;
    return null;
end;
$function$
;

comment on function commands_history_leaves() is
    'After a delete of commands (prune_commands(), which archives each with its history first): their history entries go too (one node; the foreign key''s cascade did this before 0030).';

grant execute on function commands_history_leaves() to public;
