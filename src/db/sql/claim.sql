
        with lease as (
            -- Shared lock: a takeover of the lease waits until this claim commits,
            -- so the new holder's adoption sees every row bound here.
            select id, generation from authorities
            where id = any($1) and lease_holder = $2 and lease_expires_at > now()
            for share
        ),
        pending as (
            -- Per leased authority, its oldest pending rows straight from the
            -- partial index (authority_id, id) where pending: the cost does
            -- not grow with the finished rows the ledger keeps.
            select p.id, l.generation
            from lease l
            cross join lateral (
                select c.id from commands c
                where c.authority_id = l.id and c.state = 'pending'
                order by c.id
                limit $3
                for update of c skip locked
            ) p
            limit $3
        ),
        stale as (
            select c.id, l.generation
            from commands c
            join lease l on l.id = c.authority_id
            where c.state = 'prepared' and c.authority_generation = l.generation
              and c.updated_at < now() - make_interval(secs => $5)
            order by c.id
            limit $3
            for update of c skip locked
        ),
        picked as (
            select id, generation from pending
            union all
            select id, generation from stale
        ),
        verdict as (
            select p.id, p.generation,
                   case
                       when c.deadline_at <= now() then 'deadline_passed'
                       when c.pinned_generation < p.generation then 'authority_superseded'
                       when c.pinned_generation > p.generation then 'generation_not_current'
                   end as expiry
            from picked p join commands c on c.id = p.id
        )
        update commands c
        set state = case when v.expiry is null then 'prepared' else 'expired' end,
            authority_generation = case when v.expiry is null then v.generation else c.authority_generation end,
            error = case when v.expiry is not null then
                        jsonb_build_object('reason', v.expiry, 'pinned_generation', c.pinned_generation,
                                           'authority_generation', v.generation)
                    end
        from verdict v, (select set_config('command_ledger.actor', $4, true)) as ctx
        where c.id = v.id
        returning c.*
        