CREATE OR REPLACE FUNCTION public.ledger_shard_step_copies_current(p_shard bigint)
 RETURNS boolean
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
declare
    steps constant text[] := array['ledger_claim_start_authority', 'ledger_record_outcomes'];
    here integer := (select l.groupid from pg_dist_local_group l);
    g record;
    step text;
    copies oid[];
begin
    select * into g from ledger_shard_groups_here() h where h.shardid = p_shard;
    if not found then
        return false;
    end if;
    foreach step in array steps loop
        copies := array(select p.oid from pg_proc p
                        where p.pronamespace = 'public'::regnamespace and p.proname = step || '_s' || p_shard);
        -- One copy, whose definition is what the step makes of it today.
        if cardinality(copies) <> 1
           or md5(pg_get_functiondef(copies[1]))
              <> md5(ledger_shard_step_copy(pg_get_functiondef(to_regproc('public.' || step)), step,
                                            g.shardid, g.lo, g.hi, g.shards, here)) then
            return false;
        end if;
    end loop;
    return true;
end;
$function$
;

comment on function ledger_shard_step_copies_current(p_shard bigint) is
    'On a node of a Citus cluster: whether the shard group of commands shard p_shard is placed here and both copies of the engine steps that name its shards are what ledger_shard_step_copy() makes of the steps today (0039): none missing, none made from another text of a step. A custodian runs a group''s copies only then, and the steps as they are otherwise.';

grant execute on function ledger_shard_step_copies_current(p_shard bigint) to public;
