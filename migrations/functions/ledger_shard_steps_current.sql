CREATE OR REPLACE FUNCTION public.ledger_shard_steps_current()
 RETURNS boolean
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
begin
    -- Both copies of every group here, each what its step makes today, and
    -- no copy of a group elsewhere.
    return not exists (
               select 1 from ledger_shard_groups_here() g
               where not ledger_shard_step_copies_current(g.shardid))
       and not exists (
               select 1 from pg_proc p
               where p.pronamespace = 'public'::regnamespace
                 and p.proname ~ '^ledger_(claim_start_authority|record_outcomes)_s[0-9]+$'
                 and substring(p.proname from '_s([0-9]+)$')::bigint
                     not in (select g.shardid from ledger_shard_groups_here() g));
end;
$function$
;

comment on function ledger_shard_steps_current() is
    'On a node of a Citus cluster: whether it holds both copies of the engine steps for every shard group here, each what ledger_shard_step_copy() makes of its step today, and none for a group elsewhere (0039); `command-ledger migrate` makes them again when a node says no.';

grant execute on function ledger_shard_steps_current() to public;
