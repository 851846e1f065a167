CREATE OR REPLACE FUNCTION public.prune_authority(p_authority text, older_than interval, max_rows integer)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'public', 'pg_temp'
AS $function$
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
               'history', coalesce((select jsonb_agg(to_jsonb(h) order by h.seq)
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
$function$
;

comment on function prune_authority(p_authority text, older_than interval, max_rows integer) is
    'prune_commands() for one authority: archives into pruned_commands, then deletes, at most max_rows of its commands that finished more than older_than ago (and that no hold refers to), with their history, the requests coalesced into them and their command_keys rows. Only prune_commands() calls it.';

revoke all on function prune_authority(p_authority text, older_than interval, max_rows integer) from public;
