CREATE OR REPLACE FUNCTION public.ledger_make_shard_steps_here()
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $functionx$
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
$functionx$
;

comment on function ledger_make_shard_steps_here() is
    'On a node of a Citus cluster: makes (or refreshes) this node''s copies of the engine steps that name the shards of each group of commands placed here (ledger_claim_start_authority_s<shard>, ledger_record_outcomes_s<shard>; 0039), and drops the copies of groups no longer here. Returns how many copies it made. Run on every node by `command-ledger migrate`, as the owner while it is a member of ledger_engine.';

revoke all on function ledger_make_shard_steps_here() from public;
