CREATE OR REPLACE FUNCTION public.refuse_authority_removal()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
begin
    raise exception 'authorities are kept: removing one would let its generations be issued again'
        using errcode = 'CL005';
end;
$function$
;

comment on function refuse_authority_removal() is
    'Refuses delete and truncate on authorities: a generation, once issued, is never issued again.';

grant execute on function refuse_authority_removal() to public;
