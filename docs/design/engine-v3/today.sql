-- Today's write path, driven from one backend with no client in the way:
-- claim (src/db/sql/claim.sql, the pending part), start and record
-- (src/db/lifecycle.rs), each its own transaction, in batches of :batch,
-- until the authority `proto` has nothing pending. The statements are the
-- service's, with its parameters inlined; every trigger of today runs.
-- Run with default_transaction_isolation = serializable for the custodian's
-- start and record (the claim runs at it too here: see engine-v3.md).
create or replace procedure proto_today(p_batch int)
language plpgsql as $$
declare
    ids uuid[];
begin
    loop
        perform set_config('command_ledger.actor', 'custodian:proto', true);
        with lease as (
            select id, generation, now() as at from authorities
            where id = 'proto' and lease_holder = 'proto-holder' and lease_expires_at > now()
            for share
        ),
        queued as (
            select l.id as authority_id, q.id, l.generation
            from lease l
            cross join lateral (
                select q.id from command_queue q
                where q.authority_id = l.id
                order by q.id limit p_batch
                for update of q skip locked
            ) q
            limit p_batch
        ),
        pending as (
            select c.authority_id, c.id, qd.generation
            from queued qd join commands c on c.authority_id = qd.authority_id and c.id = qd.id
            where c.authority_id = 'proto' and c.state = 'pending'
            for update of c skip locked
        ),
        verdict as (
            select p.authority_id, p.id, p.generation, c.pinned_generation,
                   case
                       when c.deadline_at <= l.at then 'deadline_passed'
                       when c.pinned_generation < p.generation then 'authority_superseded'
                       when c.pinned_generation > p.generation then 'generation_not_current'
                   end as expiry
            from pending p
            join lease l on l.id = p.authority_id
            join commands c on c.authority_id = p.authority_id and c.id = p.id
        ),
        moved as (
            update commands c
            set state = case when v.expiry is null then 'prepared' else 'expired' end,
                authority_generation = case when v.expiry is null then v.generation else c.authority_generation end,
                error = case when v.expiry is not null then
                            ('{"reason": "' || v.expiry || '"}')::jsonb end
            from verdict v
            where c.authority_id = 'proto' and c.authority_id = v.authority_id and c.id = v.id
            returning c.id
        )
        select array_agg(id) into ids from moved;
        exit when ids is null;
        commit;

        perform set_config('command_ledger.actor', 'custodian:proto', true);
        with a as materialized (
            select now() as at from authorities
            where id = 'proto' and generation = 1 and lease_holder = 'proto-holder' and lease_expires_at > now()
        )
        update commands c
        set state = case when c.deadline_at <= a.at then 'expired' else 'effect_started' end,
            error = case when c.deadline_at <= a.at then '{"reason": "deadline_passed"}'::jsonb end
        from a
        where c.id = any(ids) and c.state = 'prepared' and c.authority_generation = 1
          and c.authority_id = 'proto';
        commit;

        perform set_config('command_ledger.actor', 'custodian:proto', true);
        update commands c
        set state = 'applied', result = jsonb_build_object('refund_id', 'rf_' || left(c.id::text, 8))
        from authorities a
        where c.id = any(ids) and c.state = 'effect_started' and c.authority_generation = 1
          and c.authority_id = 'proto' and a.id = 'proto' and a.generation = 1;
        commit;
    end loop;
end;
$$;
