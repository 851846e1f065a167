CREATE OR REPLACE FUNCTION public.commands_identity_digest_immutable()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
begin
    raise exception 'command % identity digest is written by the engine only', old.id
        using errcode = 'CL003';
end;
$function$
;

comment on function commands_identity_digest_immutable() is
    'Refuses any change to commands.identity_digest by a statement that does not run as ledger_engine (CL003).';

grant execute on function commands_identity_digest_immutable() to public;
