CREATE OR REPLACE FUNCTION public.ledger_actor()
 RETURNS text
 LANGUAGE sql
 STABLE
AS $function$
    select coalesce(nullif(current_setting('command_ledger.actor', true), ''),
                    'sql:' || coalesce(nullif(current_setting('role', true), 'none'), session_user::text))
$function$
;

comment on function ledger_actor() is
    'Actor for history rows: setting command_ledger.actor, else sql:<the role the session acts as>.';

grant execute on function ledger_actor() to public;
