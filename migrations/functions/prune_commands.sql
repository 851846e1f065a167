CREATE OR REPLACE FUNCTION public.prune_commands(older_than interval, max_rows integer)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
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
$function$
;

comment on function prune_commands(older_than interval, max_rows integer) is
    'Archives into pruned_commands, then deletes, at most max_rows finished commands that finished more than older_than ago (and that no hold refers to), with their history, the requests coalesced into them and their keys'' command_keys rows; one authority at a time (prune_authority).';

revoke all on function prune_commands(older_than interval, max_rows integer) from public;
grant execute on function prune_commands(older_than interval, max_rows integer) to ledger_retention;
