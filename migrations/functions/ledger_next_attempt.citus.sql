CREATE OR REPLACE FUNCTION public.ledger_next_attempt(p_authority text, p_id uuid, p_retry_in double precision, p_retry_within double precision)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
declare
    at timestamptz := now();
    c commands%rowtype;
    first uuid;
    ready timestamptz;
    deadline timestamptz;
begin
    -- As on one node (the attempt after p_id, which the calling statement
    -- has just recorded failed with nothing done), in two statements: the
    -- failed row read, then a single-row insert. Called from the record
    -- step on the worker holding p_authority's shards, both run there; an
    -- INSERT ... SELECT would take Citus's insert-select path, which
    -- connects to the shard as this function's owner, and ledger_engine
    -- may not log in. No command_keys row is written: an attempt is found
    -- from its chain's first command (commands_attempts), never by its key.
    -- Citus gives a copy of this function made on a worker added later
    -- EXECUTE for PUBLIC, whatever the coordinator's copy allows; the
    -- coordinator delegates the call without checking. The worker's session
    -- is the caller's own role: only a custodian's may go on.
    if not pg_has_role(session_user, 'ledger_custodian', 'member') then
        raise exception 'permission denied: only ledger_custodian runs the engine steps'
            using errcode = '42501';
    end if;
    if p_retry_in is null then
        return false;
    end if;
    select * into c from commands
    where authority_id = p_authority and id = p_id
      and state = 'failed' and error ->> 'reason' in ('not_dispatched', 'not_applied');
    if not found then
        return false;
    end if;
    first := case when c.attempt > 1 then c.retry_of else c.id end;
    ready := at + make_interval(secs => p_retry_in);
    deadline := case when c.attempt = 1 and p_retry_within is not null
                     then least(c.deadline_at, c.created_at + make_interval(secs => p_retry_within))
                     else c.deadline_at end;
    if deadline is not null and ready >= deadline then
        return false;
    end if;
    insert into commands (id, scope, idempotency_key, request_digest, digest_version, kind, authority_id,
                          run_id, args, canonical, deadline_at, pinned_generation, intent_digest,
                          canonical_rules, retry_of, not_before, priority, trace_parent, trace_state,
                          attempt)
    values (ledger_uuid_v7(), c.scope, 'attempt:' || first || ':' || (c.attempt + 1), c.request_digest,
            c.digest_version, c.kind, p_authority, c.run_id, c.args, c.canonical, deadline,
            c.pinned_generation, c.intent_digest, c.canonical_rules, first, ready, c.priority,
            c.trace_parent, c.trace_state, c.attempt + 1)
    on conflict do nothing;
    if not found then
        return false;
    end if;
    -- The shard's webhook trigger has already announced the failure: it is
    -- not the chain's outcome, so its events are taken back.
    perform ledger_withdraw_retried_events(p_authority, p_id);
    return true;
end;
$function$
;

alter function ledger_next_attempt(p_authority text, p_id uuid, p_retry_in double precision, p_retry_within double precision) owner to ledger_engine;

comment on function ledger_next_attempt(p_authority text, p_id uuid, p_retry_in double precision, p_retry_within double precision) is
    'Engine step (0046; Citus): writes the next attempt of p_authority''s command p_id, which the calling statement has just recorded failed with nothing done (error.reason not_dispatched or not_applied; the record step, and recovery''s resolution by the reconcile probe): a pending command of attempt + 1 naming its chain''s first command in retry_of, not claimed before p_retry_in seconds from now; not written when it could not start before the chain''s deadline (deadline_at, on a first attempt tightened to created_at + p_retry_within seconds) or when the chain has it already. Returns whether it wrote one. A read, then a single-row insert, both on the worker holding the authority''s shards (delegated, and called there by the record step); no command_keys row; the failure''s webhook events, written by the shard''s row-level trigger before the attempt existed, withdrawn (ledger_withdraw_retried_events).';

revoke all on function ledger_next_attempt(p_authority text, p_id uuid, p_retry_in double precision, p_retry_within double precision) from public;
grant execute on function ledger_next_attempt(p_authority text, p_id uuid, p_retry_in double precision, p_retry_within double precision) to ledger_custodian;
