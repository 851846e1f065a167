-- The rest of the ledger on Citus: resolutions beside their command,
-- execution counts a shard can write, pruning one authority at a time.
--
-- Each of the three ran only on one node before (docs/SCALING.md):
--   * command_resolutions was a table of the coordinator's, and its admit
--     trigger looked the command up by id alone "for share", which Citus
--     refuses ("could not run distributed query with FOR UPDATE/SHARE");
--   * the execution and outcome counts (0017) are written by a
--     statement-level trigger of command_history into the coordinator's
--     ledger_counts, and neither a statement-level trigger nor a write to a
--     coordinator's table runs on a shard, so on Citus nothing counted them;
--   * prune_commands() locked finished commands of every authority in one
--     statement ("for update ... skip locked" over all shards: refused).
-- On one node nothing changes in what is enforced or counted.

-------------------------------------------------------------------------------
-- Resolutions carry their command's authority (the distribution column).
-------------------------------------------------------------------------------

alter table command_resolutions add column authority_id text;

alter table command_resolutions disable trigger command_resolutions_append_only;
update command_resolutions r
set authority_id = coalesce((select c.authority_id from commands c where c.id = r.command_id),
                            (select p.authority_id from pruned_commands p where p.id = r.command_id));
alter table command_resolutions enable trigger command_resolutions_append_only;

alter table command_resolutions alter column authority_id set not null;

comment on column command_resolutions.authority_id is
    'The authority of the command (commands.authority_id): the column the ledger is distributed by, so a resolution '
    'lives on its command''s shard. Given by the writer; the admit trigger checks the command is of it.';

create or replace function command_resolutions_admit() returns trigger
language plpgsql security definer set search_path = public, pg_temp as $$
declare
    current_state text;
begin
    select c.state into current_state from commands c
    where c.authority_id = new.authority_id and c.id = new.command_id
    for share;
    if current_state is null then
        raise exception 'no command % of authority %', new.command_id, new.authority_id using errcode = 'CL012';
    end if;
    if current_state <> 'ambiguous' then
        raise exception 'command % is %, not ambiguous: only an ambiguous command is resolved', new.command_id,
            current_state using errcode = 'CL012';
    end if;
    new.at := now();
    -- By (command_id, id), the index that reads this command's entries only (0021).
    new.anchor_hash := (select h.hash from command_history h
                        where h.authority_id = new.authority_id and h.command_id = new.command_id
                        order by h.command_id desc, h.id desc limit 1);
    new.hash := ledger_resolution_hash(new.anchor_hash, new.command_id, new.outcome, new.evidence,
                                       new.reference, new.source, new.actor, new.at);
    return new;
end;
$$;

-------------------------------------------------------------------------------
-- Execution counts a shard can write.
-------------------------------------------------------------------------------

create table ledger_counts_by_authority (
    authority_id text not null,
    minute       timestamptz not null,
    counter      text not null,
    source       text not null,
    n            bigint not null,
    constraint ledger_counts_by_authority_pkey primary key (authority_id, minute, counter, source)
);

comment on table ledger_counts_by_authority is
    'On Citus: the executions, outcomes and submit-to-applied latencies of ledger_counts, counted by the shards'' '
    'history trigger (commands_record_change_row) per authority, beside its commands; folded into ledger_counts by '
    'ledger_counts_compact() once the minute is over, and read together with it. Empty on one node, where '
    'command_history''s statement-level trigger writes ledger_counts itself.';
comment on column ledger_counts_by_authority.authority_id is 'The authority whose commands were counted.';
comment on column ledger_counts_by_authority.minute is 'Start of the minute counted.';
comment on column ledger_counts_by_authority.counter is 'As ledger_counts.counter: executions, applied, failed, ambiguous, latency_le_<ms>.';
comment on column ledger_counts_by_authority.source is 'pg:<backend pid> of the worker''s backend: one writer per row.';
comment on column ledger_counts_by_authority.n is 'How many in that minute from that source.';

create or replace function commands_record_change_row() returns trigger
language plpgsql security definer set search_path = public, pg_temp as $$
declare
    entry_at timestamptz := now();
    entry_actor text := ledger_actor();
    entry_reason text := coalesce(ledger_reason(),
                                  case when new.state <> old.state then new.error ->> 'reason' end,
                                  case when new.state = old.state
                                       then 'adopted by generation ' || new.authority_generation end);
    entry_digest bytea := ledger_row_digest(row(new.*)::commands);
    prev bytea;
    counted text[];
    count_minute timestamptz;
    count_source text;
begin
    select h.hash into prev from command_history h
    where h.authority_id = new.authority_id and h.command_id = new.id
    order by h.command_id desc, h.id desc limit 1;
    insert into command_history (authority_id, command_id, from_state, to_state, at, actor, authority_generation,
                                 reason, row_digest, prev_hash, hash)
    values (new.authority_id, new.id, old.state, new.state, entry_at, entry_actor, new.authority_generation,
            entry_reason, entry_digest, prev,
            ledger_entry_hash(prev, new.id, old.state, new.state, entry_at, entry_actor, new.authority_generation,
                              entry_reason, entry_digest));
    if old.state = 'pending' and new.state <> 'pending' then
        delete from command_queue q where q.authority_id = old.authority_id and q.id = old.id;
    end if;
    if old.state = 'pending' and new.state in ('prepared', 'effect_started') then
        insert into command_in_flight (authority_id, id) values (new.authority_id, new.id);
    end if;
    if old.state in ('prepared', 'effect_started') and ledger_state_terminal(new.state) then
        delete from command_in_flight f where f.authority_id = old.authority_id and f.id = old.id;
    end if;
    -- The counts ledger_count_history() makes on one node, for this entry.
    -- Every value is computed first: the statement then names constants only.
    if new.state <> old.state and new.state in ('effect_started', 'applied', 'failed', 'ambiguous') then
        counted := array[case when new.state = 'effect_started' then 'executions' else new.state end];
        if new.state = 'applied' then
            counted := counted || ledger_latency_bucket(extract(epoch from (entry_at - new.created_at)) * 1000);
        end if;
        count_minute := date_trunc('minute', entry_at);
        count_source := 'pg:' || pg_backend_pid();
        insert into ledger_counts_by_authority (authority_id, minute, counter, source, n)
        select new.authority_id, count_minute, c.counter, count_source, 1
        from unnest(counted) as c (counter)
        on conflict (authority_id, minute, counter, source)
        do update set n = ledger_counts_by_authority.n + excluded.n;
    end if;
    -- No NOTIFY here: on a shard it would be sent on the worker, where no
    -- waiter listens, and a transaction that wrote to two nodes cannot
    -- commit after one ("cannot PREPARE a transaction that has executed
    -- LISTEN, UNLISTEN, or NOTIFY"). On Citus, waiters and custodians poll.
    return null;
end;
$$;

comment on function commands_record_change_row() is
    'Row-level form of commands_record_changes() (used on Citus, fired when the state or generation changes): '
    'one chained history entry, command_queue and command_in_flight follow the state, and the entry is counted in '
    'ledger_counts_by_authority as ledger_count_history() counts it on one node. No NOTIFY (it would be sent on the '
    'worker, and would stop a two-node transaction from committing): on Citus, waiters poll.';

-- Folds the shards' counts into ledger_counts with the finished minutes of
-- the other sources (0017's folding, unchanged, follows).
create or replace function ledger_counts_compact() returns bigint
language plpgsql security definer set search_path = public, pg_temp as $$
declare
    folded bigint := 0;
    written bigint;
    finished timestamptz := date_trunc('minute', now()) - interval '2 minutes';
    past_a_day timestamptz := date_trunc('day', now(), 'UTC') - interval '1 day';
begin
    with old as (
        delete from ledger_counts_by_authority
        where minute < finished
        returning minute, counter, n
    )
    insert into ledger_counts (minute, counter, source, n)
    select minute, counter, '', sum(n) from old group by minute, counter
    on conflict (minute, counter, source) do update set n = ledger_counts.n + excluded.n;
    get diagnostics written = row_count;
    folded := folded + written;

    with old as (
        delete from ledger_counts
        where source <> '' and minute < finished
        returning minute, counter, n
    )
    insert into ledger_counts (minute, counter, source, n)
    select minute, counter, '', sum(n) from old group by minute, counter
    on conflict (minute, counter, source) do update set n = ledger_counts.n + excluded.n;
    get diagnostics written = row_count;
    folded := folded + written;

    with old as (
        delete from ledger_counts
        where source = '' and minute < past_a_day
          and minute <> date_trunc('day', minute, 'UTC')
        returning minute, counter, n
    )
    insert into ledger_counts (minute, counter, source, n)
    select date_trunc('day', minute, 'UTC'), counter, '', sum(n) from old group by 2, 1
    on conflict (minute, counter, source) do update set n = ledger_counts.n + excluded.n;
    get diagnostics written = row_count;
    return folded + written;
end;
$$;

comment on function ledger_counts_compact() is
    'Folds ledger_counts: the shards'' counts (ledger_counts_by_authority) and other sources'' finished minutes into '
    'one row per minute and counter (source empty), minutes older than a day into one row per day. Sums are '
    'unchanged. Called by API processes about once a minute.';

-------------------------------------------------------------------------------
-- Pruning, one authority at a time: each statement names the authority, so
-- on Citus it runs on that authority's shard group.
-------------------------------------------------------------------------------

create function prune_authority(p_authority text, older_than interval, max_rows integer) returns integer
language plpgsql security definer set search_path = public, pg_temp as $$
declare
    ids uuid[];
    scopes uuid[];
    keys text[];
begin
    select array_agg(v.id) into ids
    from (
        select c.id
        from commands c
        where c.authority_id = p_authority
          and c.finished_at < now() - older_than
          and not exists (select 1 from holds h
                          where h.authority_id = p_authority and (h.resembles = c.id or h.command_id = c.id))
        order by c.id
        limit max_rows
        for update of c skip locked
    ) v;
    if ids is null then
        return 0;
    end if;
    insert into pruned_commands (id, scope, idempotency_key, kind, authority_id, state,
                                 created_at, finished_at, pruned_by, record)
    select c.id, c.scope, c.idempotency_key, c.kind, c.authority_id, c.state,
           c.created_at, c.finished_at, ledger_actor(),
           jsonb_build_object(
               'command', to_jsonb(c),
               'history', coalesce((select jsonb_agg(to_jsonb(h) order by h.id)
                                    from command_history h
                                    where h.authority_id = p_authority and h.command_id = c.id), '[]'::jsonb),
               'coalesced', coalesce((select jsonb_agg(to_jsonb(r) order by r.answered_at)
                                      from coalesced_requests r
                                      where r.authority_id = p_authority and r.command_id = c.id), '[]'::jsonb))
    from commands c
    where c.authority_id = p_authority and c.id = any(ids);
    select array_agg(c.scope), array_agg(c.idempotency_key) into scopes, keys
    from commands c
    where c.authority_id = p_authority and c.id = any(ids);
    delete from command_keys k
    where (k.scope, k.idempotency_key) in (select * from unnest(scopes, keys))
      and k.command_id = any(ids);
    delete from commands c where c.authority_id = p_authority and c.id = any(ids);
    return cardinality(ids);
end;
$$;

comment on function prune_authority(text, interval, integer) is
    'prune_commands() for one authority: archives into pruned_commands, then deletes, at most max_rows of its '
    'commands that finished more than older_than ago (and that no hold refers to), with their history, the requests '
    'coalesced into them and their command_keys rows. Only prune_commands() calls it.';

create or replace function prune_commands(older_than interval, max_rows integer) returns integer
language plpgsql security definer set search_path = public, pg_temp as $$
declare
    a text;
    pruned integer := 0;
begin
    if older_than < interval '1 minute' then
        raise exception 'refusing to prune commands that finished less than a minute ago (older_than %)', older_than
            using errcode = 'CL007';
    end if;
    for a in
        select distinct c.authority_id from commands c
        where c.finished_at < now() - older_than
        order by 1
    loop
        exit when pruned >= max_rows;
        pruned := pruned + prune_authority(a, older_than, max_rows - pruned);
    end loop;
    return pruned;
end;
$$;

comment on function prune_commands(interval, integer) is
    'Archives into pruned_commands, then deletes, at most max_rows finished commands that finished more than '
    'older_than ago (and that no hold refers to), with their history, the requests coalesced into them and their '
    'keys'' command_keys rows; one authority at a time (prune_authority).';

-------------------------------------------------------------------------------
-- Views keep their grants and comments through the distribution. Making a
-- "Citus local table" (a table with a foreign key to a reference table) a
-- reference table re-creates the views over it without either: the
-- inspector then could not read holds_awaiting_decision. The step now notes
-- each view's grants and comment first and gives back what was lost.
-------------------------------------------------------------------------------

create or replace function ledger_distribute() returns int
language plpgsql security definer set search_path = public, pg_temp as $$
declare
    t record;
    v record;
    f regprocedure;
    done int := 0;
begin
    if not exists (select 1 from pg_extension where extname = 'citus') then
        raise exception 'ledger_distribute() needs a Citus coordinator (create extension citus; add the workers)'
            using errcode = 'CL013';
    end if;
    -- Every process migrates when it starts: one distributes, the others
    -- then find the work done.
    perform pg_advisory_xact_lock(7242019);
    create temporary table ledger_views_before on commit drop as
    select c.relname::text as view_name, a.privilege_type, a.grantee::regrole::text as grantee,
           obj_description(c.oid, 'pg_class') as description
    from pg_class c
    left join lateral aclexplode(c.relacl) a on a.grantee <> c.relowner and a.grantee <> 0
    where c.relkind = 'v' and c.relnamespace = 'public'::regnamespace
      and not exists (select 1 from pg_depend d where d.objid = c.oid and d.deptype = 'e');
    -- Row-level triggers of a distributed table run on its shards.
    set local citus.enable_unsafe_triggers = on;
    for t in select * from ledger_distribution order by position loop
        if to_regclass(t.table_name) is null
           or exists (select 1 from pg_dist_partition p
                      where p.logicalrelid = t.table_name::regclass
                        and case t.method when 'reference' then p.repmodel = 't' else p.partmethod = 'h' end) then
            continue;
        end if;
        -- A table with a foreign key to a reference table may already be a
        -- "Citus local table" (Citus converts it when the referenced table is
        -- distributed first): create_reference_table takes it from there.
        for i in 1 .. coalesce(array_length(t.rekey, 1), 0) loop
            execute t.rekey[i];
        end loop;
        -- The copy into the shards would trip the tables' own refusals (the
        -- frozen reference data refuses every insert).
        execute format('alter table %I disable trigger user', t.table_name);
        if t.method = 'reference' then
            perform create_reference_table(t.table_name::regclass);
        else
            perform create_distributed_table(t.table_name::regclass, t.distribution_column,
                                             colocate_with => coalesce(t.colocate_with, 'none'));
        end if;
        execute format('alter table %I enable trigger user', t.table_name);
        done := done + 1;
    end loop;
    -- Views re-created on the way get back their grants and comments.
    for v in select * from ledger_views_before b where to_regclass(b.view_name) is not null loop
        if v.grantee is not null and not has_table_privilege(v.grantee, v.view_name, v.privilege_type) then
            execute format('grant %s on %I to %I', v.privilege_type, v.view_name, v.grantee);
        end if;
        if v.description is not null and obj_description(v.view_name::regclass, 'pg_class') is null then
            execute format('comment on view %I is %L', v.view_name, v.description);
        end if;
    end loop;
    -- Functions created before any table was distributed exist only on the
    -- coordinator: the shards' triggers call them on the workers. (After the
    -- tables: a function of a table's row type needs its table distributed.)
    for f in
        select p.oid::regprocedure from pg_proc p
        where p.pronamespace = 'public'::regnamespace
          and not exists (select 1 from pg_depend d where d.objid = p.oid and d.deptype = 'e')
          and not exists (select 1 from pg_dist_object o where o.classid = 'pg_proc'::regclass and o.objid = p.oid)
    loop
        perform create_distributed_function(f);
    end loop;
    return done;
end;
$$;

comment on function ledger_distribute() is
    'On a Citus coordinator: distributes every table of ledger_distribution not distributed yet (rekeying it first), '
    'gives the views it re-creates on the way back their grants and comments, and makes the ledger''s functions '
    'known to the workers. Returns how many tables it distributed. Idempotent.';

-- The view joins each hold to the command it resembles by authority and id
-- (a hold is its command's authority's), so that on Citus the join stays
-- on one shard group; a ledger distributed before this migration had lost
-- its grants and comment, given back here.
create or replace view holds_awaiting_decision as
select h.id, h.kind, h.authority_id, h.run_id, h.created_at, now() - h.created_at as waiting_for,
       h.resembles, c.state as resembles_state, coalesce(p.name, f.name) as principal
from holds h
left join principals p on p.id = h.scope
left join fleets f on f.id = h.scope
join commands c on c.authority_id = h.authority_id and c.id = h.resembles
where h.state = 'open'
order by h.created_at;

grant select on holds_awaiting_decision to ledger_api, ledger_custodian, ledger_inspector, ledger_retention;
comment on view holds_awaiting_decision is
    'Open holds, oldest first, with the command each resembles and the principal (or fleet) whose scope holds them.';

-------------------------------------------------------------------------------
-- Roles (0016) and the layout on Citus (0019).
-------------------------------------------------------------------------------

grant select on ledger_counts_by_authority to ledger_api, ledger_custodian, ledger_inspector, ledger_retention;
revoke all on function prune_authority(text, interval, integer) from public;
revoke all on function prune_commands(interval, integer) from public;
grant execute on function prune_commands(interval, integer) to ledger_retention;
revoke all on function ledger_counts_compact() from public;
revoke all on function ledger_distribute() from public;
grant execute on function ledger_counts_compact() to ledger_api;

insert into ledger_distribution (position, table_name, method, distribution_column, colocate_with, rekey) values
    (28, 'command_resolutions', 'distributed', 'authority_id', 'commands', array[
        'alter table command_resolutions drop constraint command_resolutions_pkey',
        'alter table command_resolutions add constraint command_resolutions_pkey primary key (authority_id, command_id)'
    ]),
    (29, 'ledger_counts_by_authority', 'distributed', 'authority_id', 'commands', '{}');
