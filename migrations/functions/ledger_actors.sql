CREATE OR REPLACE FUNCTION public.ledger_actors()
 RETURNS TABLE(command_id uuid, actor text)
 LANGUAGE sql
 STABLE
AS $function$
    select key::uuid, value
    from jsonb_each_text(coalesce(nullif(current_setting('command_ledger.actors', true), ''), '{}')::jsonb)
$function$
;

comment on function ledger_actors() is
    'Per-command actors of a multi-row insert: setting command_ledger.actors ({"<command id>": actor}), as rows.';

grant execute on function ledger_actors() to public;
