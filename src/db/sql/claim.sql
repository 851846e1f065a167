        -- Every table is filtered by the authorities ($1) and every join keeps
        -- to one authority, so on Citus a claim for one authority is a
        -- single-shard (router) statement; the custodian claims one authority
        -- per statement there. Citus also refuses a function that is not
        -- immutable inside CASE: the clock is read once, in `lease`, and the
        -- expiry's error is built with immutable text operations.
        with lease as (
            -- Shared lock: a takeover of the lease waits until this claim commits,
            -- so the new holder's adoption sees every row bound here.
            select id, generation, now() as at from authorities
            where id = any($1) and lease_holder = $2 and lease_expires_at > now()
            for share
        ),
        queued as (
            -- Per leased authority, its first unclaimed rows from the queue
            -- table (the claimable set lives there, not in an index of
            -- commands). Locking the queue row keeps other claimers off it;
            -- the commands trigger deletes it when the row leaves pending.
            -- Lowest claim rank first (priority, aged: migration 0028), ties
            -- by id (arrival); a command whose not_before is ahead waits.
            select l.id as authority_id, q.id, l.generation
            from lease l
            cross join lateral (
                select q.id from command_queue q
                where q.authority_id = l.id and q.authority_id = any($1)
                  and (q.ready_at is null or q.ready_at <= l.at)
                order by q.rank, q.id
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
            where c.authority_id = any($1) and c.state = 'pending'
            for update of c skip locked
        ),
        stale as (
            -- Prepared rows whose claim never got to start them (the holder
            -- died or gave up between claim and start), from the in-flight
            -- table; only when asked ($5): the custodian looks now and then,
            -- not on every claim.
            select c.authority_id, c.id, l.generation
            from lease l
            join command_in_flight f on f.authority_id = l.id
            join commands c on c.authority_id = f.authority_id and c.id = f.id
            where $5 and f.authority_id = any($1) and c.authority_id = any($1)
              and c.state = 'prepared' and c.authority_generation = l.generation
              and c.updated_at < l.at - make_interval(secs => $4)
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
            select p.authority_id, p.id, p.generation, c.pinned_generation,
                   case
                       when c.deadline_at <= l.at then 'deadline_passed'
                       when c.pinned_generation < p.generation then 'authority_superseded'
                       when c.pinned_generation > p.generation then 'generation_not_current'
                   end as expiry
            from picked p
            join lease l on l.id = p.authority_id
            join commands c on c.authority_id = p.authority_id and c.id = p.id
            where c.authority_id = any($1)
        )
        update commands c
        set state = case when v.expiry is null then 'prepared' else 'expired' end,
            authority_generation = case when v.expiry is null then v.generation else c.authority_generation end,
            error = case when v.expiry is not null then
                        ('{"reason": "' || v.expiry || '", "pinned_generation": '
                         || coalesce(v.pinned_generation::text, 'null')
                         || ', "authority_generation": ' || v.generation::text || '}')::jsonb
                    end
        from verdict v
        where c.authority_id = any($1) and c.authority_id = v.authority_id and c.id = v.id
        returning c.*
