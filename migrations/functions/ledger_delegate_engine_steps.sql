CREATE OR REPLACE FUNCTION public.ledger_delegate_engine_steps()
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
declare
    f regprocedure;
    done integer := 0;
begin
    if not exists (select 1 from pg_extension where extname = 'citus') then
        raise exception 'ledger_delegate_engine_steps() needs a Citus coordinator'
            using errcode = 'CL013';
    end if;
    for f in
        select p.oid::regprocedure from pg_proc p
        where p.pronamespace = 'public'::regnamespace
          and p.proname in ('ledger_claim_start_authority', 'ledger_record_outcomes', 'ledger_next_attempt',
                            'ledger_regroup_authority')
    loop
        if not exists (select 1 from pg_dist_object o
                       where o.classid = 'pg_proc'::regclass and o.objid = f
                         and o.distribution_argument_index is not null) then
            perform create_distributed_function(f, 'p_authority', colocate_with := 'commands',
                                                force_delegation := true);
            -- A function Citus creates on a worker may be executed by PUBLIC
            -- there, whatever the coordinator's copy allows: said again now,
            -- the revoke reaches every node.
            execute format('revoke all on function %s from public', f);
            execute format('grant execute on function %s to ledger_custodian', f);
            done := done + 1;
        end if;
    end loop;
    return done;
end;
$function$
;

comment on function ledger_delegate_engine_steps() is
    'On a Citus coordinator, after ledger_distribute(): the engine steps (ledger_claim_start_authority, ledger_record_outcomes, ledger_next_attempt, ledger_regroup_authority) are run by the worker holding p_authority''s shards, the whole call in one round trip, also inside a transaction block (force_delegation), executable by ledger_custodian only on every node. Returns how many it delegated. Idempotent.';

revoke all on function ledger_delegate_engine_steps() from public;
