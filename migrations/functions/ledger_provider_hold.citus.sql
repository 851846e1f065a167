CREATE OR REPLACE FUNCTION public.ledger_provider_hold(p_places jsonb)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
declare
    held bigint := 0;
begin
    -- p_places: [{"provider", "authority", "id"}], commands of provider
    -- groups started: by the claim before it in this transaction, under the
    -- groups' locks (ledger_provider_rooms), or found in flight without a
    -- place by a custodian's reconciliation. Each holds a place of its group
    -- until its outcome is recorded, and takes a token of its bucket.
    insert into provider_places (authority_id, command_id, provider)
    select x.authority, x.id, x.provider
    from jsonb_to_recordset(p_places) as x (provider text, authority text, id uuid)
    join provider_limits l on l.name = x.provider
    on conflict do nothing;
    get diagnostics held = row_count;
    update provider_limits l
    set tokens = ledger_provider_tokens(l.tokens, l.rate, l.burst, l.refilled_at, now()) - n.started,
        refilled_at = now()
    from (select x.provider, count(*) as started
          from jsonb_to_recordset(p_places) as x (provider text)
          group by x.provider) n
    where l.name = n.provider and l.rate is not null;
    return held;
end;
$function$
;

alter function ledger_provider_hold(p_places jsonb) owner to ledger_engine;

comment on function ledger_provider_hold(p_places jsonb) is
    'Engine step (0049; Citus, on the coordinator): a place in provider_places for each command of a provider group started ([{"provider", "authority", "id"}]: by the worker''s claim with p_rooms before it in the transaction, or found in flight without one), and a token of its group''s bucket each. Returns how many places it took.';

revoke all on function ledger_provider_hold(p_places jsonb) from public;
grant execute on function ledger_provider_hold(p_places jsonb) to ledger_custodian;
