CREATE OR REPLACE FUNCTION public.refuse_webhook_truncate()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
begin
    raise exception '% is kept: disable an endpoint instead of truncating', tg_table_name
        using errcode = 'CL014';
end;
$function$
;

comment on function refuse_webhook_truncate() is
    'Refuses truncate on webhook_endpoints, webhook_events and webhook_attempts (CL014): endpoints are disabled, and what was sent, when, stays on record.';

grant execute on function refuse_webhook_truncate() to public;
