CREATE OR REPLACE FUNCTION public.holds_guard()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
begin
    if tg_op = 'DELETE' then
        raise exception 'holds are kept: hold % cannot be deleted', old.id using errcode = 'CL006';
    end if;
    if old.state <> 'open' then
        raise exception 'hold % is % and cannot change', old.id, old.state using errcode = 'CL006';
    end if;
    if (new.id, new.scope, new.kind, new.authority_id, new.args, new.canonical, new.request_digest,
        new.intent_digest, new.resembles, new.created_at, new.not_before, new.priority)
       is distinct from
       (old.id, old.scope, old.kind, old.authority_id, old.args, old.canonical, old.request_digest,
        old.intent_digest, old.resembles, old.created_at, old.not_before, old.priority) then
        raise exception 'hold % request columns are immutable', old.id using errcode = 'CL006';
    end if;
    return new;
end;
$function$
;

grant execute on function holds_guard() to public;
