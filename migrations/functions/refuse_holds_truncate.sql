CREATE OR REPLACE FUNCTION public.refuse_holds_truncate()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
begin
    raise exception 'holds are kept: holds cannot be truncated'
        using errcode = 'CL006';
end;
$function$
;

comment on function refuse_holds_truncate() is
    'Refuses truncate on holds: like deleting one (holds_guard), it would forget a decision or a request awaiting one.';

grant execute on function refuse_holds_truncate() to public;
