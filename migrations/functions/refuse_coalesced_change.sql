CREATE OR REPLACE FUNCTION public.refuse_coalesced_change()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
begin
    raise exception 'coalesced_requests is append-only'
        using errcode = 'CL003';
end;
$function$
;

comment on function refuse_coalesced_change() is
    'Refuses update and truncate on coalesced_requests: forgetting an answer would hold a retry that must replay.';

grant execute on function refuse_coalesced_change() to public;
