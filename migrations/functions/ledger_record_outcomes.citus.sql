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
            wanted uuid[];
            l record;
            k record;
            n record;
            ids uuid[] := '{}';
            identities bytea[] := '{}';
            created timestamptz[] := '{}';
            prev_ids uuid[];
            prevs bytea[];
            prev_seqs integer[];
            -- Up to this many commands, a statement a row (below).
            few constant integer := 4;
            st text;
            res jsonb;
            err jsonb;
            reason text;
            prev bytea;
            prev_seq integer;
            digest bytea;
            one uuid;
        begin
            -- Citus gives a copy of this function made on a worker added
            -- later EXECUTE for PUBLIC, whatever the coordinator's copy
            -- allows; the coordinator delegates the call without checking.
            -- The worker's session is the caller's own role (the
            -- coordinator connects as it): only a custodian's may go on.
            if not pg_has_role(session_user, 'ledger_custodian', 'member') then
                raise exception 'permission denied: only ledger_custodian runs the engine steps'
                    using errcode = '42501';
            end if;
            perform 1 from authorities a where a.id = p_authority and a.generation = p_generation;
            if not found then
                return;
            end if;
            wanted := array(select o.id from jsonb_to_recordset(p_outcomes) as o (id uuid, state text)
                            where o.state in ('applied', 'failed', 'ambiguous'));
            for l in
                select c.id, c.created_at,
                       -- Stored at submit since 0050; hashed here when it is not.
                       coalesce(c.identity_digest,
                                ledger_identity_digest(c.id, c.scope, c.idempotency_key, c.request_digest,
                                                       c.digest_version, c.kind, c.authority_id, c.run_id, c.args,
                                                       c.canonical, c.created_at, c.deadline_at, c.pinned_generation,
                                                       c.intent_digest, c.canonical_rules, c.intent_epoch)) as identity
                from commands c
                where c.authority_id = p_authority and c.id = any(wanted) and c.state = 'effect_started'
                  and c.authority_generation = p_generation
                order by c.id
                for update
            loop
                ids := ids || l.id;
                identities := identities || l.identity;
                created := created || l.created_at;
            end loop;
            if cardinality(ids) = 0 then
                return;
            end if;
            if cardinality(ids) <= few then
                -- A few commands: a statement a row, as in the claim above.
                for i in 1 .. cardinality(ids) loop
                    one := ids[i];
                    select o.state, o.result, o.error into st, res, err
                    from jsonb_to_recordset(p_outcomes) as o (id uuid, state text, result jsonb, error jsonb)
                    where o.id = one
                    limit 1;
                    select h.hash, h.seq into prev, prev_seq from command_history h
                    where h.authority_id = p_authority and h.command_id = one
                    order by h.seq desc limit 1;
                    res := case when st = 'applied' then res end;
                    reason := coalesce(why, err ->> 'reason');
                    digest := ledger_row_digest_v2(identities[i], st, p_generation, res, err, at);
                    insert into command_history (authority_id, command_id, from_state, to_state, at, actor,
                                                 authority_generation, reason, row_digest, prev_hash, hash, seq)
                    values (p_authority, one, 'effect_started', st, at, who, p_generation, reason, digest, prev,
                            ledger_entry_hash(prev, one, 'effect_started', st, at, who, p_generation, reason,
                                              digest),
                            prev_seq + 1);
                    update commands c
                    set state = st, result = res, error = err, finished_at = at, updated_at = at
                    where c.authority_id = p_authority and c.id = one;
                    delete from command_in_flight f where f.authority_id = p_authority and f.id = one;
                end loop;
            else
                select array_agg(h.command_id), array_agg(h.hash), array_agg(h.seq) into prev_ids, prevs, prev_seqs
                from (select distinct on (h.command_id) h.command_id, h.hash, h.seq from command_history h
                      where h.authority_id = p_authority and h.command_id = any(ids)
                      order by h.command_id, h.seq desc) h;
                -- The entries first: the webhook trigger reads each terminal entry
                -- when the update below fires it.
                insert into command_history (authority_id, command_id, from_state, to_state, at, actor,
                                             authority_generation, reason, row_digest, prev_hash, hash, seq)
                select p_authority, d.id, 'effect_started', d.state, at, who, p_generation, d.reason, d.digest, d.prev,
                       ledger_entry_hash(d.prev, d.id, 'effect_started', d.state, at, who, p_generation, d.reason,
                                         d.digest),
                       d.prev_seq + 1
                from (
                    select x.id, o.state, coalesce(why, o.error ->> 'reason') as reason, p.prev, p.prev_seq,
                           ledger_row_digest_v2(x.identity, o.state, p_generation,
                                                case when o.state = 'applied' then o.result end, o.error, at) as digest
                    from unnest(ids, identities) as x (id, identity)
                    join jsonb_to_recordset(p_outcomes) as o (id uuid, state text, result jsonb, error jsonb)
                      on o.id = x.id
                    left join unnest(prev_ids, prevs, prev_seqs) as p (id, prev, prev_seq) on p.id = x.id
                ) d
                order by d.id;
                update commands c
                set state = o.state,
                    result = case when o.state = 'applied' then o.result end,
                    error = o.error,
                    finished_at = at,
                    updated_at = at
                from jsonb_to_recordset(p_outcomes) as o (id uuid, state text, result jsonb, error jsonb)
                where c.authority_id = p_authority and c.id = o.id and c.id = any(ids);
                delete from command_in_flight f where f.authority_id = p_authority and f.id = any(ids);
            end if;
            -- The attempt after each failure the custodian found retryable (a
            -- failure with nothing done, under the kind's retry policy).
            for n in
                select o.id, o.retry_in, o.retry_within
                from jsonb_to_recordset(p_outcomes) as o (id uuid, state text, retry_in float8, retry_within float8)
                where o.state = 'failed' and o.retry_in is not null and o.id = any(ids)
                order by o.id
            loop
                perform ledger_next_attempt(p_authority, n.id, n.retry_in, n.retry_within);
            end loop;
            -- Each outcome, and each applied command's latency bucket: one
            -- single-row upsert a counter. Citus runs a single-row insert on
            -- its fast path; an INSERT ... SELECT takes its insert-select
            -- path, about ten times the time for the few counters of a batch
            -- (docs/runs/citus-step-statements.txt).
            for k in
                select c.counter, count(*) as n
                from (
                    select o.state as counter
                    from unnest(ids) as x (id)
                    join jsonb_to_recordset(p_outcomes) as o (id uuid, state text) on o.id = x.id
                    union all
                    select ledger_latency_bucket(extract(epoch from (at - x.created_at)) * 1000)
                    from unnest(ids, created) as x (id, created_at)
                    join jsonb_to_recordset(p_outcomes) as o (id uuid, state text) on o.id = x.id
                    where o.state = 'applied'
                ) c
                group by c.counter
                order by c.counter
            loop
                insert into ledger_counts_by_authority (authority_id, minute, counter, source, n)
                values (p_authority, date_trunc('minute', at), k.counter, 'pg:' || pg_backend_pid(), k.n)
                on conflict (authority_id, minute, counter, source)
                do update set n = ledger_counts_by_authority.n + excluded.n;
            end loop;
            return query select unnest(ids);
        end;
        $function$
;

alter function ledger_record_outcomes(p_authority text, p_generation bigint, p_outcomes jsonb) owner to ledger_engine;

comment on function ledger_record_outcomes(p_authority text, p_generation bigint, p_outcomes jsonb) is
    'Engine step (0033, Citus): records the outcomes (a JSON array of {id, state, result, error, retry_in, retry_within}; state applied, failed or ambiguous) of p_authority''s effect_started commands, only while the authority is at p_generation, with one history entry each, the in-flight rows removed and the outcomes counted in ledger_counts_by_authority. A failure with retry_in (seconds) gets its next attempt (0046, ledger_next_attempt). Returns the ids recorded. Runs on the worker holding the authority''s shards (ledger_delegate_engine_steps()); whoever commits wakes the waiters. Run it in a SERIALIZABLE transaction.';

revoke all on function ledger_record_outcomes(p_authority text, p_generation bigint, p_outcomes jsonb) from public;
grant execute on function ledger_record_outcomes(p_authority text, p_generation bigint, p_outcomes jsonb) to ledger_custodian;
