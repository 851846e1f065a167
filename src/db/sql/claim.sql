        with lease as (
            -- Shared lock: a takeover of the lease waits until this claim commits,
            -- so the new holder's adoption sees every row bound here.
            select id, generation from authorities
            where id = any($1) and lease_holder = $2 and lease_expires_at > now()
            for share
        ),
        queued as (
            -- Per leased authority, its oldest unclaimed rows from the queue
            -- table (the claimable set lives there, not in an index of
            -- commands). Locking the queue row keeps other claimers off it;
            -- the commands trigger deletes it when the row leaves pending.
            select l.id as authority_id, q.id, l.generation
            from lease l
            cross join lateral (
                select q.id from command_queue q
                where q.authority_id = l.id
                order by q.id
                limit $3
                for update of q skip locked
            ) q
            limit $3
        ),
        pending as (
            -- The command rows themselves, skipping any another transaction
            -- holds (a cancel in progress: it takes the row out of the queue).
            select c.authority_id, c.id, qd.generation
            from queued qd join commands c on c.authority_id = qd.authority_id and c.id = qd.id
            where c.state = 'pending'
            for update of c skip locked
        ),
        stale as (
            -- Prepared rows whose claim never got to start them (the holder
            -- died or gave up between claim and start), from the in-flight
            -- table; only when asked ($6): the custodian looks now and then,
            -- not on every claim.
            select c.authority_id, c.id, l.generation
            from lease l
            join command_in_flight f on f.authority_id = l.id
            join commands c on c.authority_id = f.authority_id and c.id = f.id
            where $6 and c.state = 'prepared' and c.authority_generation = l.generation
              and c.updated_at < now() - make_interval(secs => $5)
            order by c.id
            limit $3
            for update of c skip locked
        ),
        picked as (
            select authority_id, id, generation from pending
            union all
            select authority_id, id, generation from stale
        ),
        verdict as (
            select p.authority_id, p.id, p.generation,
                   case
                       when c.deadline_at <= now() then 'deadline_passed'
                       when c.pinned_generation < p.generation then 'authority_superseded'
                       when c.pinned_generation > p.generation then 'generation_not_current'
                   end as expiry
            from picked p join commands c on c.authority_id = p.authority_id and c.id = p.id
        )
        update commands c
        set state = case when v.expiry is null then 'prepared' else 'expired' end,
            authority_generation = case when v.expiry is null then v.generation else c.authority_generation end,
            error = case when v.expiry is not null then
                        jsonb_build_object('reason', v.expiry, 'pinned_generation', c.pinned_generation,
                                           'authority_generation', v.generation)
                    end
        from verdict v, (select set_config('command_ledger.actor', $4, true)) as ctx
        where c.authority_id = v.authority_id and c.id = v.id
        returning c.*
