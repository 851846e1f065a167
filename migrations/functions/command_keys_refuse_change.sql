CREATE OR REPLACE FUNCTION public.command_keys_refuse_change()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
begin
    if tg_op = 'TRUNCATE' then
        raise exception 'command_keys is kept: it cannot be truncated'
            using errcode = 'CL003';
    end if;
    raise exception 'command_keys rows are never changed (key %)', old.idempotency_key
        using errcode = 'CL003';
end;
$function$
;

comment on function command_keys_refuse_change() is
    'Refuses update and truncate on command_keys: a key names its command for good (prune_commands() deletes it with the command).';

revoke all on function command_keys_refuse_change() from public;
