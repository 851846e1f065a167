CREATE OR REPLACE FUNCTION public.ledger_make_shard_steps_here()
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
declare
    steps constant text[] := array['ledger_claim_start_authority', 'ledger_record_outcomes'];
    here integer := (select l.groupid from pg_dist_local_group l);
    g record;
    step text;
    copy text;
    made_oid regprocedure;
    made regprocedure[] := '{}';
    old regprocedure;
begin
    if not exists (select 1 from pg_extension where extname = 'citus') then
        raise exception 'ledger_make_shard_steps_here() needs Citus' using errcode = 'CL013';
    end if;
    -- One maker at a time on this node; the copies are this node's alone.
    perform pg_advisory_xact_lock(hashtext('ledger_make_shard_steps'));
    perform set_config('citus.enable_ddl_propagation', 'off', true);
    for g in select * from ledger_shard_groups_here() loop
        foreach step in array steps loop
            copy := step || '_s' || g.shardid;
            -- A copy of another signature (the step's changed) goes first.
            for old in
                select p.oid::regprocedure from pg_proc p
                where p.pronamespace = 'public'::regnamespace and p.proname = copy
                  and pg_get_function_identity_arguments(p.oid)
                      <> pg_get_function_identity_arguments(to_regproc('public.' || step))
            loop
                execute format('drop function %s', old);
            end loop;
            execute ledger_shard_step_copy(pg_get_functiondef(to_regproc('public.' || step)), step,
                                           g.shardid, g.lo, g.hi, g.shards, here);
            made_oid := to_regproc('public.' || copy)::regprocedure;
            execute format('alter function %s owner to ledger_engine', made_oid);
            execute format('revoke all on function %s from public', made_oid);
            execute format('grant execute on function %s to ledger_custodian', made_oid);
            made := made || made_oid;
        end loop;
    end loop;
    -- The copies of groups no longer (wholly) here.
    for old in
        select p.oid::regprocedure from pg_proc p
        where p.pronamespace = 'public'::regnamespace
          and p.proname ~ '^ledger_(claim_start_authority|record_outcomes)_s[0-9]+$'
          and p.oid::regprocedure <> all (made)
    loop
        execute format('drop function %s', old);
    end loop;
    return cardinality(made);
end;
$function$
;

comment on function ledger_make_shard_steps_here() is
    'On a node of a Citus cluster: makes (or refreshes) this node''s copies of the engine steps that name the shards of each group of commands placed here (ledger_claim_start_authority_s<shard>, ledger_record_outcomes_s<shard>; 0039), each as ledger_shard_step_copy() makes it from the step today, and drops the copies of groups no longer here. Returns how many copies it made. Run on every node by `command-ledger migrate`, as the owner while it is a member of ledger_engine.';

revoke all on function ledger_make_shard_steps_here() from public;
