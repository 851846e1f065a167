-- The custodian's step for prepared rows: those an adoption rebound to the
-- lease's generation (a custodian taking a lease over, or recovery), and
-- any other writer's (an operator's, or an older release's claim that died
-- before its start). The claim itself never leaves a row prepared
-- (ledger_claim_start moves pending rows to effect_started in one
-- statement). Runs as the schema's owner, not as the engine's role: the
-- triggers of commands write the history, the in-flight rows and the
-- counters, as for every writer but the engine. At the caller's isolation.
-- PL/pgSQL, not SQL: Citus plans no parameter of an SQL function.
CREATE OR REPLACE FUNCTION public.ledger_start_prepared(p_authority text, p_holder text, p_limit integer)
 RETURNS SETOF commands
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
begin
    -- Citus gives a worker's copy of a function EXECUTE for PUBLIC
    -- whatever the coordinator's allows, and a call there runs as its
    -- owner: only a custodian's session may go on.
    if not pg_has_role(session_user, 'ledger_custodian', 'member') then
        raise exception 'permission denied: only ledger_custodian starts prepared commands'
            using errcode = '42501';
    end if;
    return query
    with lease as materialized (
        -- Shared lock: a takeover of the lease waits until this commits.
        -- The clock is read once, here (Citus allows only immutable
        -- functions inside CASE).
        select a.id, a.generation, now() as at from authorities a
        where a.id = p_authority and a.lease_holder = p_holder and a.lease_expires_at > now()
        for share
    ),
    picked as (
        -- From the in-flight table, which holds the authority's prepared
        -- and started rows; skipping any another transaction holds (a
        -- cancel, or a start of the same row).
        select c.id
        from lease l
        join command_in_flight f on f.authority_id = l.id
        join commands c on c.authority_id = f.authority_id and c.id = f.id
        where f.authority_id = p_authority and c.authority_id = p_authority
          and c.state = 'prepared' and c.authority_generation = l.generation
        order by c.id
        limit p_limit
        for update of c skip locked
    )
    update commands c
    set state = case when c.deadline_at <= l.at then 'expired' else 'effect_started' end,
        error = case when c.deadline_at <= l.at then '{"reason": "deadline_passed"}'::jsonb end
    from picked p, lease l
    where c.authority_id = p_authority and c.id = p.id
      and c.state = 'prepared' and c.authority_generation = l.generation
    returning c.*;
end
$function$
;

comment on function ledger_start_prepared(p_authority text, p_holder text, p_limit integer) is
    'Custodian step: up to p_limit prepared commands of p_authority bound to the generation p_holder leases (adopted, or left by another writer) moved to effect_started, or to expired when their deadline passed. Returns the rows as they now are. Fenced by the lease row held for share; no effect starts before it commits.';

-- Anyone may call it; it refuses every session but a custodian's (above).
-- A revoke would not hold on Citus: a worker's copy made when the tables
-- are first distributed gets EXECUTE for PUBLIC whatever the coordinator's
-- allows, so a fresh cluster and an upgraded one would differ.
grant execute on function ledger_start_prepared(p_authority text, p_holder text, p_limit integer) to public;
