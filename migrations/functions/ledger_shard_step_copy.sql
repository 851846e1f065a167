CREATE OR REPLACE FUNCTION public.ledger_shard_step_copy(p_def text, p_step text, p_shardid bigint, p_lo integer, p_hi integer, p_shards jsonb, p_here integer)
 RETURNS text
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $functionx$
declare
    at_body integer := strpos(p_def, E'\nAS $function$');
    named constant text := 'FUNCTION public.' || p_step || '(';
    history constant text := p_shards ->> 'command_history';
    head text;
    body text;
    t text;
    inserts integer;
    drawn integer;
    guard text;
begin
    -- Each substitution below either applies as the copy needs or raises:
    -- a copy made from a text it does not fit would run without its guard,
    -- under another name, or through Citus for a table it missed.
    if at_body = 0 then
        raise exception 'the definition of % has no body in $function$ quotes', p_step using errcode = 'CL016';
    end if;
    head := left(p_def, at_body);
    body := substr(p_def, at_body + 1);
    -- The name, once in the head (else the copy would replace the step).
    if (length(head) - length(replace(head, named, ''))) / length(named) <> 1 then
        raise exception 'the head of % does not name it once: %', p_step, head using errcode = 'CL016';
    end if;
    head := replace(head, named, 'FUNCTION public.' || p_step || '_s' || p_shardid || '(');
    -- Every table of the group the body names (outside its comments), by
    -- its shard here.
    for t in
        select c.relname::text from pg_dist_partition d join pg_class c on c.oid = d.logicalrelid
        where c.relnamespace = 'public'::regnamespace
          and d.colocationid = (select colocationid from pg_dist_partition where logicalrelid = 'commands'::regclass)
          and not p_shards ? c.relname::text
    loop
        if regexp_replace(body, '--[^\n]*', '', 'g') ~ ('\m' || t || '\M') then
            raise exception '% names %, a table of its shard group that the copies do not name by shard', p_step, t
                using errcode = 'CL016';
        end if;
    end loop;
    for t in select jsonb_object_keys(p_shards) loop
        body := regexp_replace(body, '\m' || t || '\M', p_shards ->> t, 'g');
    end loop;
    -- Every insert into the history's shard gives the id (it has no default).
    body := ledger_history_ids_drawn(body, history);
    inserts := (select count(*) from regexp_matches(body, 'insert\s+into\s+' || history || '\M', 'gi'));
    drawn := (select count(*) from regexp_matches(body, 'insert into ' || history || ' \(id, authority_id,', 'g'));
    if inserts <> drawn then
        raise exception '% inserts into the history % times, % of them in the form whose id the copy draws', p_step, inserts, drawn
            using errcode = 'CL016';
    end if;
    -- The guard opens the body, before its first statement: the authority
    -- hashes into the group, a write through Citus holds the group's shard
    -- metadata lock until commit (no move of the group completes
    -- meanwhile), and the placement is still here.
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
$guard$, p_shardid, p_lo, p_hi, p_here);
    if body !~ E'\n\\s*begin\n' then
        raise exception 'the body of % has no line ''begin'' to open the guard after', p_step using errcode = 'CL016';
    end if;
    body := regexp_replace(body, E'\n(\\s*)begin\n', E'\n\\1begin\n' || guard);
    return head || body;
end;
$functionx$
;

comment on function ledger_shard_step_copy(p_def text, p_step text, p_shardid bigint, p_lo integer, p_hi integer, p_shards jsonb, p_here integer) is
    'On a node of a Citus cluster: the definition of the copy of engine step p_step (whose definition is p_def) that names the shards p_shards of the group of commands shard p_shardid (hash range p_lo..p_hi) on the node of group p_here, with its guard (0039). Raises (CL016) when a substitution does not fit the text. ledger_make_shard_steps_here() runs what it returns; a copy is current when its definition is what this returns today.';

revoke all on function ledger_shard_step_copy(p_def text, p_step text, p_shardid bigint, p_lo integer, p_hi integer, p_shards jsonb, p_here integer) from public;
