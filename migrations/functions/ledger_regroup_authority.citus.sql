CREATE OR REPLACE FUNCTION public.ledger_regroup_authority(p_authority text, p_kinds jsonb)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
declare
    changed bigint := 0;
    added bigint := 0;
    moved bigint := 0;
begin
    -- p_kinds: {"<kind>": "<group>"}, the groups of a custodian's catalog
    -- for the authority p_authority it serves. Run on the worker holding
    -- the authority's shards (delegated): the authority's mapping, and its
    -- queued commands of a kind whose group changed moved to it.
    if not pg_has_role(session_user, 'ledger_custodian', 'member') then
        raise exception 'permission denied: only ledger_custodian runs the engine steps'
            using errcode = '42501';
    end if;
    delete from authority_provider_kinds k
    where k.authority_id = p_authority
      and not exists (select 1 from jsonb_each_text(p_kinds) as m (kind, provider)
                      where m.kind = k.kind and m.provider = k.provider);
    get diagnostics changed = row_count;
    insert into authority_provider_kinds (authority_id, kind, provider)
    select p_authority, m.kind, m.provider from jsonb_each_text(p_kinds) as m (kind, provider)
    on conflict (authority_id, kind) do nothing;
    get diagnostics added = row_count;
    if changed + added > 0 then
        update command_queue q set provider = k.provider
        from commands c
        left join authority_provider_kinds k on k.authority_id = c.authority_id and k.kind = c.kind
        where q.authority_id = p_authority and c.authority_id = p_authority and c.id = q.id
          and q.provider is distinct from k.provider;
        get diagnostics moved = row_count;
    end if;
    return moved;
end;
$function$
;

alter function ledger_regroup_authority(p_authority text, p_kinds jsonb) owner to ledger_engine;

comment on function ledger_regroup_authority(p_authority text, p_kinds jsonb) is
    'Engine step (0049; Citus): writes which provider group each kind of p_kinds ({"<kind>": "<group>"}, a custodian''s catalog) belongs to at the authority p_authority (authority_provider_kinds; kinds not named are under no limit there), and moves the authority''s queued commands of a kind whose group changed. Runs on the worker holding the authority''s shards (ledger_delegate_engine_steps()). Returns how many queued commands moved.';

revoke all on function ledger_regroup_authority(p_authority text, p_kinds jsonb) from public;
grant execute on function ledger_regroup_authority(p_authority text, p_kinds jsonb) to ledger_custodian;
