CREATE OR REPLACE FUNCTION public.ledger_remember_coalesced(p_authority_id text, p_scope uuid, p_request_digest bytea, p_command_id uuid, p_run_id text)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
begin
    if not exists (select 1 from commands c
                   where c.id = p_command_id and c.scope = p_scope and c.authority_id = p_authority_id) then
        raise exception 'command % is not of scope % and authority %', p_command_id, p_scope, p_authority_id
            using errcode = 'CL009';
    end if;
    insert into coalesced_requests (authority_id, scope, request_digest, command_id, run_id)
    values (p_authority_id, p_scope, p_request_digest, p_command_id, p_run_id)
    on conflict do nothing;
end;
$function$
;

comment on function ledger_remember_coalesced(p_authority_id text, p_scope uuid, p_request_digest bytea, p_command_id uuid, p_run_id text) is
    'Remembers that a request (scope, authority, request digest, run id) was answered with a command of the same scope and authority (CL009 otherwise); the only way a service role writes coalesced_requests.';

revoke all on function ledger_remember_coalesced(p_authority_id text, p_scope uuid, p_request_digest bytea, p_command_id uuid, p_run_id text) from public;
grant execute on function ledger_remember_coalesced(p_authority_id text, p_scope uuid, p_request_digest bytea, p_command_id uuid, p_run_id text) to ledger_api;
