CREATE OR REPLACE FUNCTION public.ledger_provider_rooms(p_providers text[])
 RETURNS jsonb
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
declare
    rooms jsonb := '{}';
    p record;
begin
    -- The groups p_providers are locked in name order until the
    -- transaction ends: the claim of their commands that follows in it (the
    -- worker's, with p_rooms) and the places and tokens it takes
    -- (ledger_provider_hold) take turns with every other custodian's.
    perform 1 from provider_limits l
    where l.name = any(p_providers)
    order by l.name
    for update of l;
    -- Statements of their own, so that their snapshots hold what the claims
    -- this one waited for committed: their places. Each group's
    -- room: its places free and its bucket's whole tokens now, whichever
    -- is less.
    for p in
        select l.name, l.max_in_flight, l.rate, l.burst, l.tokens, l.refilled_at
        from provider_limits l
        where l.name = any(p_providers)
        order by l.name
    loop
        rooms := rooms || jsonb_build_object(p.name, greatest(0, least(
            case when p.max_in_flight is not null
                 then p.max_in_flight - ledger_provider_in_flight(p.name)::integer
                 else 2147483647 end,
            coalesce(floor(ledger_provider_tokens(p.tokens, p.rate, p.burst, p.refilled_at, now()))::integer,
                     2147483647))));
    end loop;
    return rooms;
end;
$function$
;

comment on function ledger_provider_rooms(p_providers text[]) is
    'On Citus (0049), on the coordinator: locks the provider groups p_providers (name order) until the transaction ends and returns each one''s room, {"<group>": n}: the fewer of its places free (max_in_flight less its provider_places) and its bucket''s whole tokens now. The worker''s claim of their commands in the same transaction takes it as p_rooms, and ledger_provider_hold takes the places and tokens.';

revoke all on function ledger_provider_rooms(p_providers text[]) from public;
grant execute on function ledger_provider_rooms(p_providers text[]) to ledger_custodian;
