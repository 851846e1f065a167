CREATE OR REPLACE FUNCTION public.ledger_shard_groups_here(OUT shardid bigint, OUT lo integer, OUT hi integer, OUT shards jsonb)
 RETURNS SETOF record
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
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
$function$
;

comment on function ledger_shard_groups_here(OUT shardid bigint, OUT lo integer, OUT hi integer, OUT shards jsonb) is
    'On a node of a Citus cluster: each group of the engine steps'' tables whose shards are all placed here, by its shard of commands, with its hash range and its shards'' names by table (0039).';

revoke all on function ledger_shard_groups_here(OUT shardid bigint, OUT lo integer, OUT hi integer, OUT shards jsonb) from public;
