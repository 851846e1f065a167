CREATE OR REPLACE FUNCTION public.refuse_credentials_truncate()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
begin
    raise exception '% is kept: revoke tokens instead of truncating', tg_table_name
        using errcode = 'CL011';
end;
$function$
;

comment on function refuse_credentials_truncate() is
    'Refuses truncate on principals, fleets and api_tokens: the history names principals, and a token is revoked, not erased.';

grant execute on function refuse_credentials_truncate() to public;
