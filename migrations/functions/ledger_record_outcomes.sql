CREATE OR REPLACE FUNCTION public.ledger_record_outcomes(p_authority text, p_generation bigint, p_outcomes jsonb)
 RETURNS SETOF uuid
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
 SET enable_seqscan TO 'off'
 SET enable_bitmapscan TO 'off'
AS $function$
declare
    at timestamptz := now();
    who text := ledger_actor();
    why text := ledger_reason();
begin
    return query
    with outcome as materialized (
        select o.id, o.state, o.result, o.error, o.retry_in, o.retry_within
        from jsonb_to_recordset(p_outcomes)
             as o (id uuid, state text, result jsonb, error jsonb, retry_in float8, retry_within float8)
        where o.state in ('applied', 'failed', 'ambiguous')
    ),
    fenced as materialized (
        select o.*,
               last.hash as prev, last.seq as prev_seq
        from outcome o
        join commands c on c.authority_id = p_authority and c.id = o.id
        join authorities a on a.id = p_authority and a.generation = p_generation
        left join lateral (select h.hash, h.seq from command_history h where h.command_id = o.id
                           order by h.command_id desc, h.seq desc limit 1) last on true
        where c.state = 'effect_started' and c.authority_generation = p_generation
        for update of c
    ),
    moved as (
        update commands c
        set state = f.state,
            result = case when f.state = 'applied' then f.result end,
            error = f.error,
            finished_at = at,
            identity_digest = coalesce(c.identity_digest,
                                       ledger_identity_digest(c.id, c.scope, c.idempotency_key, c.request_digest,
                                                              c.digest_version, c.kind, c.authority_id, c.run_id,
                                                              c.args, c.canonical, c.created_at, c.deadline_at,
                                                              c.pinned_generation, c.intent_digest,
                                                              c.canonical_rules, c.intent_epoch)),
            updated_at = at
        from fenced f
        where c.authority_id = p_authority and c.id = f.id
        returning c.id, c.state, c.authority_generation, c.result, c.error, c.identity_digest, c.created_at, f.prev, f.prev_seq
    ),
    digested as materialized (
        select m.*, coalesce(why, m.error ->> 'reason') as reason,
               ledger_row_digest_v2(m.identity_digest, m.state, m.authority_generation, m.result, m.error, at)
                   as digest
        from moved m
    ),
    entries as (
        insert into command_history (authority_id, command_id, from_state, to_state, at, actor,
                                     authority_generation, reason, row_digest, prev_hash, hash, seq)
        select p_authority, d.id, 'effect_started', d.state, at, who, d.authority_generation, d.reason, d.digest,
               d.prev,
               ledger_entry_hash(d.prev, d.id, 'effect_started', d.state, at, who, d.authority_generation,
                                 d.reason, d.digest),
               d.prev_seq + 1
        from digested d
        order by d.id
        returning 1
    ),
    next_attempts as (
        -- The attempt after each failure the custodian found retryable (a
        -- failure with nothing done, under the kind's retry policy).
        select ledger_next_attempt(p_authority, f.id, f.retry_in, f.retry_within)
        from fenced f
        where f.state = 'failed' and f.retry_in is not null
          and f.id = any (array(select m.id from moved m))
    ),
    landed as (
        -- By key, one probe a row (a join with the CTE rescans it per row).
        delete from command_in_flight f
        where f.authority_id = p_authority and f.id = any (array(select m.id from moved m))
        returning 1
    ),
    counted as (
        -- What the history's counting trigger adds for other writers: each
        -- outcome, and each applied command's latency bucket.
        insert into ledger_counts (minute, counter, source, n)
        select date_trunc('minute', at), k.counter, 'pg:' || pg_backend_pid(), count(*)
        from (
            select d.state as counter from digested d
            union all
            select ledger_latency_bucket(extract(epoch from (at - d.created_at)) * 1000)
            from digested d where d.state = 'applied'
        ) k
        group by k.counter
        on conflict (minute, counter, source) do update set n = ledger_counts.n + excluded.n
        returning 1
    ),
    told as (
        select pg_notify('command_ledger_outcome', m.id::text) from moved m
    )
    select m.id from moved m
    where (select count(*) from entries) >= 0 and (select count(*) from landed) >= 0
      and (select count(*) from counted) >= 0 and (select count(*) from told) >= 0
      and (select count(*) from next_attempts) >= 0;
end;
$function$
;

alter function ledger_record_outcomes(p_authority text, p_generation bigint, p_outcomes jsonb) owner to ledger_engine;

comment on function ledger_record_outcomes(p_authority text, p_generation bigint, p_outcomes jsonb) is
    'Engine step (0030): records the outcomes (a JSON array of {id, state, result, error, retry_in, retry_within}; state applied, failed or ambiguous) of p_authority''s effect_started commands, only while the authority is at p_generation, with one history entry each, the in-flight rows removed and a NOTIFY command_ledger_outcome each. A failure with retry_in (seconds) gets its next attempt (0046, ledger_next_attempt). Returns the ids recorded. Run it in a SERIALIZABLE transaction.';

revoke all on function ledger_record_outcomes(p_authority text, p_generation bigint, p_outcomes jsonb) from public;
grant execute on function ledger_record_outcomes(p_authority text, p_generation bigint, p_outcomes jsonb) to ledger_custodian;
