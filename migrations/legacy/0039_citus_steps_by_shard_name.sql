-- 0039: on Citus, each node holds, for each shard group of the ledger it
-- hosts, a copy of both engine steps that names that group's shard tables,
-- so that a step's statements run on the shards without Citus's planner and
-- executor in between.
--
-- A step run on the node holding its authority's shards (0033) still sent
-- each statement through Citus, which planned and executed it as a
-- distributed statement before running it locally: a claim-and-start of one
-- command took 4.0 ms there, 1.5 to 1.7 ms with the same statements naming
-- the shards, and a submit-and-wait call 13 to 15 ms against one node's 5
-- (docs/runs/citus-steps-by-shard-name.txt). A function can name a table
-- only in its text (a name built per call is planned on every call, which
-- gave back most of the gain), hence a copy per shard group, made here from
-- the steps as they are defined (pg_get_functiondef) with each table's name
-- replaced by its shard's:
--
--   ledger_claim_start_authority_s<shard>(p_authority, p_holder, p_limit)
--   ledger_record_outcomes_s<shard>(p_authority, p_generation, p_outcomes)
--
-- where <shard> is the id of the group's shard of commands. A custodian
-- calls a copy on the node holding the shards when that node has it
-- (db::placement), and the steps as they are otherwise.
--
-- What makes a copy safe, in its first statements:
-- - the authority must hash into the copy's shards (else it refuses);
-- - a write through Citus to the group (a delete that matches no row):
--   Citus then holds, until commit, the group's shard metadata lock in
--   share mode, which a shard move takes in exclusive mode on every node
--   before it switches the group over; so no move completes while the copy
--   runs, and what it writes to the old placement meanwhile is carried by
--   the move's replication;
-- - the placement read after that lock must still be this node's (after a
--   move it is not, and the copy refuses, with CL015: the custodian asks
--   the coordinator again where the shards are). In a SERIALIZABLE
--   transaction (the record) that read sees the snapshot taken when the
--   call began; a move completed between that snapshot and the lock is
--   caught by the write before it, which Citus routes by its current
--   metadata: to the new node, which it would have to reach as
--   ledger_engine, a role that logs in nowhere, so the step fails there as
--   the steps as they are do (db::placement).
-- A shard table has no default for command_history's id (Citus computes
-- it for statements through it), so a copy's history inserts draw it
-- (ledger_history_id()), from this node's range of the sequence as Citus's
-- own inserts on this node do.
--
-- ledger_make_shard_steps_here() makes (or refreshes) a node's copies and
-- drops those of groups the node no longer holds, as the owner, who gives
-- them to ledger_engine: `command-ledger migrate` runs it on every node
-- after distributing, while the owner is that role's member, and does so
-- whenever a node says its copies are not current
-- (ledger_shard_steps_current(): after shards moved or were split). Until
-- then the groups that moved run the steps as they are (correct, slower).
-- A migration that re-creates the steps is followed by it as any is.

create function ledger_history_id() returns bigint
language sql security definer
set search_path to 'public', 'pg_temp'
as $$ select nextval('command_history_id_seq') $$;

comment on function ledger_history_id() is
    'The next id of command_history, drawn by its owner, from the node''s range of the sequence: for the engine '
    'steps'' copies that write its shards by name (0039).';
revoke all on function ledger_history_id() from public;
grant execute on function ledger_history_id() to ledger_engine;

create function ledger_history_ids_drawn(p_body text, p_history text) returns text
language plpgsql immutable security definer
set search_path to 'public', 'pg_temp'
as $$
declare
    marker constant text := 'insert into ' || p_history || ' (authority_id,';
    pieces text[] := string_to_array(p_body, marker);
    piece text;
    out text := pieces[1];
    at_values integer;
    at_select integer;
begin
    for i in 2 .. coalesce(cardinality(pieces), 0) loop
        piece := pieces[i];
        at_values := strpos(piece, 'values (p_authority,');
        at_select := strpos(piece, 'select p_authority,');
        if at_values > 0 and (at_select = 0 or at_values < at_select) then
            piece := overlay(piece placing 'values (ledger_history_id(), p_authority,' from at_values
                             for length('values (p_authority,'));
        elsif at_select > 0 then
            piece := overlay(piece placing 'select ledger_history_id(), p_authority,' from at_select
                             for length('select p_authority,'));
        else
            raise exception 'an insert into % whose first value is not p_authority', p_history;
        end if;
        out := out || 'insert into ' || p_history || ' (id, authority_id,' || piece;
    end loop;
    return out;
end;
$$;

comment on function ledger_history_ids_drawn(text, text) is
    'For ledger_make_shard_steps_here() (0039): a step''s body whose inserts into the history shard p_history '
    '(columns from authority_id, first value p_authority) give the id too, drawn by ledger_history_id(): a '
    'shard table has no default for it (Citus computes it for statements through it).';
revoke all on function ledger_history_ids_drawn(text, text) from public;

create function ledger_shard_groups_here(out shardid bigint, out lo integer, out hi integer, out shards jsonb)
returns setof record
language plpgsql stable security definer
set search_path to 'public', 'pg_temp'
as $$
declare
    tables constant text[] := array['commands', 'command_history', 'command_queue', 'command_in_flight',
                                    'ledger_counts_by_authority', 'authorities'];
    here integer := (select l.groupid from pg_dist_local_group l);
    g record;
    t text;
    shard text;
begin
    -- Each group of shards of commands placed here, with its hash range.
    for g in
        select s.shardid, s.shardminvalue::integer as lo, s.shardmaxvalue::integer as hi
        from pg_dist_shard s join pg_dist_placement p on p.shardid = s.shardid
        where s.logicalrelid = 'commands'::regclass and p.groupid = here
        order by s.shardid
    loop
        -- The same range of every table of the steps, co-located and here.
        shards := '{}';
        foreach t in array tables loop
            select shard_name(s.logicalrelid, s.shardid) into shard
            from pg_dist_shard s
            join pg_dist_partition d on d.logicalrelid = s.logicalrelid
            join pg_dist_placement p on p.shardid = s.shardid and p.groupid = here
            where s.logicalrelid = t::regclass
              and d.colocationid = (select colocationid from pg_dist_partition where logicalrelid = 'commands'::regclass)
              and s.shardminvalue::integer = g.lo and s.shardmaxvalue::integer = g.hi;
            exit when shard is null or to_regclass(shard) is null;
            shards := shards || jsonb_build_object(t, shard);
        end loop;
        continue when shard is null or to_regclass(shard) is null;
        shardid := g.shardid;
        lo := g.lo;
        hi := g.hi;
        return next;
    end loop;
end;
$$;

comment on function ledger_shard_groups_here() is
    'On a node of a Citus cluster: each group of the engine steps'' tables whose shards are all placed here, by '
    'its shard of commands, with its hash range and its shards'' names by table (0039).';
revoke all on function ledger_shard_groups_here() from public;

create function ledger_shard_steps_current() returns boolean
language plpgsql stable security definer
set search_path to 'public', 'pg_temp'
as $$
begin
    -- Both copies of every group here, and no copy of a group elsewhere.
    return not exists (
               select 1 from ledger_shard_groups_here() g
               where to_regprocedure(format('ledger_claim_start_authority_s%s(text,text,integer)', g.shardid)) is null
                  or to_regprocedure(format('ledger_record_outcomes_s%s(text,bigint,jsonb)', g.shardid)) is null)
       and not exists (
               select 1 from pg_proc p
               where p.pronamespace = 'public'::regnamespace
                 and p.proname ~ '^ledger_(claim_start_authority|record_outcomes)_s[0-9]+$'
                 and substring(p.proname from '_s([0-9]+)$')::bigint
                     not in (select g.shardid from ledger_shard_groups_here() g));
end;
$$;

comment on function ledger_shard_steps_current() is
    'On a node of a Citus cluster: whether it holds both copies of the engine steps for every shard group here '
    'and none for a group elsewhere (0039); `command-ledger migrate` makes them again when a node says no.';
-- Asked by every process as it starts (`command-ledger migrate`'s check that
-- nothing is left to do): it says whether copies are current, nothing more.
grant execute on function ledger_shard_steps_current() to public;

create function ledger_make_shard_steps_here() returns integer
language plpgsql security definer
set search_path to 'public', 'pg_temp'
as $$
declare
    tables constant text[] := array['commands', 'command_history', 'command_queue', 'command_in_flight',
                                    'ledger_counts_by_authority', 'authorities'];
    steps constant text[] := array['ledger_claim_start_authority', 'ledger_record_outcomes'];
    here integer := (select l.groupid from pg_dist_local_group l);
    g record;
    t text;
    step text;
    def text;
    head text;
    body text;
    at_body integer;
    guard text;
    copy text;
    wanted text[] := '{}';
    old regprocedure;
    made integer := 0;
begin
    if not exists (select 1 from pg_extension where extname = 'citus') then
        raise exception 'ledger_make_shard_steps_here() needs Citus' using errcode = 'CL013';
    end if;
    -- One maker at a time on this node; the copies are this node's alone.
    perform pg_advisory_xact_lock(hashtext('ledger_make_shard_steps'));
    perform set_config('citus.enable_ddl_propagation', 'off', true);
    for g in select * from ledger_shard_groups_here() loop
        guard := format($guard$
        -- A copy of the step for the shards of commands %1$s (0039):
        -- the authority hashes into them, a write through Citus holds
        -- the group's shard metadata lock until commit (no move of the
        -- group completes meanwhile), and the placement is still here.
        if worker_hash(p_authority) not between %2$s and %3$s then
            raise exception 'authority %% is not in shard %1$s', p_authority using errcode = 'CL015';
        end if;
        delete from command_in_flight f
        where f.authority_id = p_authority and f.id = '00000000-0000-0000-0000-000000000000'::uuid;
        if not exists (select 1 from pg_dist_placement p where p.shardid = %1$s and p.groupid = %4$s) then
            raise exception 'shard %1$s has left this node' using errcode = 'CL015';
        end if;
$guard$, g.shardid, g.lo, g.hi, here);
        foreach step in array steps loop
            def := pg_get_functiondef(to_regproc('public.' || step));
            at_body := strpos(def, E'\nAS $function$');
            head := left(def, at_body);
            body := substr(def, at_body + 1);
            copy := step || '_s' || g.shardid;
            head := replace(head, 'FUNCTION public.' || step || '(', 'FUNCTION public.' || copy || '(');
            foreach t in array tables loop
                body := regexp_replace(body, '\m' || t || '\M', g.shards ->> t, 'g');
            end loop;
            body := ledger_history_ids_drawn(body, g.shards ->> 'command_history');
            -- The guard opens the body, before its first statement.
            body := regexp_replace(body, E'\n(\\s*)begin\n', E'\n\\1begin\n' || guard);
            execute head || body;
            execute format('alter function %s owner to ledger_engine', to_regproc('public.' || copy)::regprocedure);
            execute format('revoke all on function %s from public', to_regproc('public.' || copy)::regprocedure);
            execute format('grant execute on function %s to ledger_custodian',
                           to_regproc('public.' || copy)::regprocedure);
            wanted := wanted || copy;
            made := made + 1;
        end loop;
    end loop;
    -- The copies of groups no longer (wholly) here.
    for old in
        select p.oid::regprocedure from pg_proc p
        where p.pronamespace = 'public'::regnamespace
          and p.proname ~ '^ledger_(claim_start_authority|record_outcomes)_s[0-9]+$'
          and p.proname <> all (wanted)
    loop
        execute format('drop function %s', old);
    end loop;
    return made;
end;
$$;

comment on function ledger_make_shard_steps_here() is
    'On a node of a Citus cluster: makes (or refreshes) this node''s copies of the engine steps that name the '
    'shards of each group of commands placed here (ledger_claim_start_authority_s<shard>, '
    'ledger_record_outcomes_s<shard>; 0039), and drops the copies of groups no longer here. Returns how many '
    'copies it made. Run on every node by `command-ledger migrate`, as the owner while it is a member of '
    'ledger_engine.';
revoke all on function ledger_make_shard_steps_here() from public;
