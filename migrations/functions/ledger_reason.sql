CREATE OR REPLACE FUNCTION public.ledger_reason()
 RETURNS text
 LANGUAGE sql
 STABLE
AS $function$
    select nullif(current_setting('command_ledger.reason', true), '')
$function$
;

comment on function ledger_reason() is
    'Reason for history rows: setting command_ledger.reason, or null.';

grant execute on function ledger_reason() to public;
