CREATE OR REPLACE FUNCTION public.ledger_utc(t timestamp with time zone)
 RETURNS text
 LANGUAGE sql
 STABLE PARALLEL SAFE
AS $function$
    select to_char(t at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
$function$
;

comment on function ledger_utc(t timestamp with time zone) is
    'A timestamp in the canonical texts of the history chain: UTC, microseconds, independent of TimeZone.';

grant execute on function ledger_utc(t timestamp with time zone) to public;
