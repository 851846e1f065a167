CREATE OR REPLACE FUNCTION public.ledger_next_attempt(p_authority text, p_id uuid, p_retry_in double precision, p_retry_within double precision)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
declare
    at timestamptz := now();
begin
    -- The attempt after p_id, which the calling statement has just recorded
    -- failed with nothing done (not dispatched, or not applied): a
    -- command of its own, pending, not claimed before p_retry_in seconds
    -- from now, naming the chain's first command; none when it could not
    -- start before the chain's deadline (the command's, tightened on the
    -- first attempt to its creation plus p_retry_within seconds), and none
    -- when the chain already has it (commands_attempts is unique).
    insert into commands (id, scope, idempotency_key, request_digest, digest_version, kind, authority_id,
                          run_id, args, canonical, deadline_at, pinned_generation, intent_digest,
                          canonical_rules, retry_of, not_before, priority, trace_parent, trace_state,
                          attempt)
    select ledger_uuid_v7(), c.scope, 'attempt:' || n.first || ':' || (c.attempt + 1), c.request_digest,
           c.digest_version, c.kind, c.authority_id, c.run_id, c.args, c.canonical, n.deadline,
           c.pinned_generation, c.intent_digest, c.canonical_rules, n.first, n.ready, c.priority,
           c.trace_parent, c.trace_state, c.attempt + 1
    from commands c
    cross join lateral (
        select case when c.attempt > 1 then c.retry_of else c.id end as first,
               at + make_interval(secs => p_retry_in) as ready,
               case when c.attempt = 1 and p_retry_within is not null
                    then least(c.deadline_at, c.created_at + make_interval(secs => p_retry_within))
                    else c.deadline_at end as deadline
    ) n
    where c.authority_id = p_authority and c.id = p_id
      and c.state = 'failed' and c.error ->> 'reason' in ('not_dispatched', 'not_applied')
      and p_retry_in is not null
      and (n.deadline is null or n.ready < n.deadline)
    on conflict do nothing;
    return found;
end;
$function$
;

alter function ledger_next_attempt(p_authority text, p_id uuid, p_retry_in double precision, p_retry_within double precision) owner to ledger_engine;

comment on function ledger_next_attempt(p_authority text, p_id uuid, p_retry_in double precision, p_retry_within double precision) is
    'Engine step (0046): writes the next attempt of p_authority''s command p_id, which the calling statement has just recorded failed with nothing done (error.reason not_dispatched or not_applied; the record step, and recovery''s resolution by the reconcile probe): a pending command of attempt + 1 naming its chain''s first command in retry_of, not claimed before p_retry_in seconds from now; not written when it could not start before the chain''s deadline (deadline_at, on a first attempt tightened to created_at + p_retry_within seconds) or when the chain has it already. Returns whether it wrote one.';

revoke all on function ledger_next_attempt(p_authority text, p_id uuid, p_retry_in double precision, p_retry_within double precision) from public;
grant execute on function ledger_next_attempt(p_authority text, p_id uuid, p_retry_in double precision, p_retry_within double precision) to ledger_custodian;
