CREATE OR REPLACE FUNCTION public.ledger_set_providers(p_providers jsonb)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
declare
    at timestamptz := now();
begin
    -- p_providers: the catalog's groups, each
    -- {"name", "max_in_flight", "rate", "burst", "kinds": [...]}; a group
    -- the catalog no longer names goes (with its places), and its kinds are
    -- under no limit. A bucket keeps its tokens (no more than its new
    -- burst); a new one starts full. Only the coordinator's tables: the
    -- kinds' groups at each authority are its shard's
    -- (ledger_regroup_authority, 0049), which this step cannot reach.
    delete from provider_kinds k
    where (k.kind, k.provider) not in (
        select kind, g ->> 'name' from jsonb_array_elements(p_providers) g,
               jsonb_array_elements_text(coalesce(g -> 'kinds', '[]')) kind);

    insert into provider_limits as p (name, max_in_flight, rate, burst, tokens, refilled_at, updated_at)
    select g.name, g.max_in_flight, g.rate, coalesce(g.burst, 1), coalesce(g.burst, 1), at, at
    from jsonb_to_recordset(p_providers) as g(name text, max_in_flight integer, rate double precision, burst integer)
    on conflict (name) do update
        set max_in_flight = excluded.max_in_flight, rate = excluded.rate, burst = excluded.burst,
            tokens = least(p.tokens, excluded.burst), updated_at = at
        where (p.max_in_flight, p.rate, p.burst) is distinct from (excluded.max_in_flight, excluded.rate, excluded.burst);

    delete from provider_places x
    where x.provider not in (select g ->> 'name' from jsonb_array_elements(p_providers) g);
    delete from provider_limits p
    where p.name not in (select g ->> 'name' from jsonb_array_elements(p_providers) g);

    insert into provider_kinds (kind, provider)
    select kind, g ->> 'name' from jsonb_array_elements(p_providers) g,
           jsonb_array_elements_text(coalesce(g -> 'kinds', '[]')) kind
    on conflict (kind) do nothing;
    return 0;
end;
$function$
;

alter function ledger_set_providers(p_providers jsonb) owner to ledger_engine;

comment on function ledger_set_providers(p_providers jsonb) is
    'Engine step (0048; Citus, 0049): the custodian''s catalog''s provider groups written to provider_limits and provider_kinds on the coordinator (the groups it no longer names removed, with their places). The queued commands follow their kind''s group at each authority through ledger_regroup_authority. Returns 0.';

revoke all on function ledger_set_providers(p_providers jsonb) from public;
grant execute on function ledger_set_providers(p_providers jsonb) to ledger_custodian;
