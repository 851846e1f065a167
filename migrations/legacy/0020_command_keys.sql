-- The key rule past one node.
--
-- An idempotency key names one command in its scope, whatever the
-- authority: on one node the unique constraint commands_scope_key_unique
-- (scope, idempotency_key) says so. On Citus every unique constraint must
-- contain the distribution column, so ledger_distribute() narrows that one
-- to (authority_id, scope, idempotency_key), and the rule across authorities
-- is kept here instead: one row per (scope, key) naming its authority and
-- command, distributed by scope. The service writes it first, in the
-- submission's own transaction (Citus commits the key's shard and the
-- command's shard together, with two-phase commit): a second command under
-- a taken key finds the key's row and is not inserted; a request for
-- another authority under it is answered 422 like on one node.
--
-- On one node the table stays empty: the constraint suffices, and the
-- submit path pays nothing for it. Distributing a populated ledger fills it
-- from commands first (its rekey statement in ledger_distribution).
create table command_keys (
    scope           uuid not null,
    idempotency_key text not null,
    authority_id    text not null,
    command_id      uuid not null,
    constraint command_keys_pkey primary key (scope, idempotency_key)
);

comment on table command_keys is
    'On Citus: which command each (scope, idempotency key) names, distributed by scope, written in the submission''s '
    'transaction; keeps a key to one command across authorities. Empty on one node (commands_scope_key_unique does it).';
comment on column command_keys.scope is 'The dedup scope the key belongs to (commands.scope).';
comment on column command_keys.idempotency_key is 'The key (commands.idempotency_key).';
comment on column command_keys.authority_id is 'The authority of the command it names: where that command''s row is.';
comment on column command_keys.command_id is 'The command it names (commands.id).';

-- A key's row names its command for good: never changed; removed only by
-- prune_commands(), with the command (no service role may delete), and
-- never truncated (that would forget which command each key names).
create function command_keys_refuse_change() returns trigger
language plpgsql security definer set search_path = public, pg_temp as $$
begin
    if tg_op = 'TRUNCATE' then
        raise exception 'command_keys is kept: it cannot be truncated'
            using errcode = 'CL003';
    end if;
    raise exception 'command_keys rows are never changed (key %)', old.idempotency_key
        using errcode = 'CL003';
end;
$$;

comment on function command_keys_refuse_change() is
    'Refuses update and truncate on command_keys: a key names its command for good (prune_commands() deletes it with the command).';

create trigger command_keys_never_change
    before update on command_keys
    for each row execute function command_keys_refuse_change();

create trigger command_keys_no_truncate
    before truncate on command_keys
    for each statement execute function command_keys_refuse_change();

-- Pruning forgets a command's key with the command.
create or replace function prune_commands(older_than interval, max_rows integer) returns integer
language plpgsql security definer set search_path = public, pg_temp as $$
declare
    ids uuid[];
    scopes uuid[];
    keys text[];
begin
    if older_than < interval '1 minute' then
        raise exception 'refusing to prune commands that finished less than a minute ago (older_than %)', older_than
            using errcode = 'CL007';
    end if;
    select array_agg(v.id) into ids
    from (
        select c.id
        from commands c
        where c.finished_at < now() - older_than
          and not exists (select 1 from holds h where h.resembles = c.id or h.command_id = c.id)
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
               'history', coalesce((select jsonb_agg(to_jsonb(h) order by h.id)
                                    from command_history h where h.command_id = c.id), '[]'::jsonb),
               'coalesced', coalesce((select jsonb_agg(to_jsonb(r) order by r.answered_at)
                                      from coalesced_requests r where r.command_id = c.id), '[]'::jsonb))
    from commands c
    where c.id = any(ids);
    select array_agg(c.scope), array_agg(c.idempotency_key) into scopes, keys
    from commands c
    where c.id = any(ids);
    delete from command_keys k
    where (k.scope, k.idempotency_key) in (select * from unnest(scopes, keys))
      and k.command_id = any(ids);
    delete from commands where id = any(ids);
    return cardinality(ids);
end;
$$;

comment on function prune_commands(interval, integer) is
    'Archives into pruned_commands, then deletes, at most max_rows finished commands that finished more than older_than ago '
    '(and that no hold refers to), with their history, the requests coalesced into them and their keys'' command_keys rows.';

-- Roles (0016): the API records keys and reads them; the others read.
grant select, insert on command_keys to ledger_api;
grant select on command_keys to ledger_custodian, ledger_inspector, ledger_retention;
revoke all on function command_keys_refuse_change() from public;
revoke all on function prune_commands(interval, integer) from public;
grant execute on function prune_commands(interval, integer) to ledger_retention;

-- On Citus: distributed by scope in a co-location group of its own, filled
-- from commands before commands itself is distributed (position 15 < 21).
insert into ledger_distribution (position, table_name, method, distribution_column, colocate_with, rekey) values
    (15, 'command_keys', 'distributed', 'scope', null, array[
        'insert into command_keys (scope, idempotency_key, authority_id, command_id) '
        'select scope, idempotency_key, authority_id, id from commands on conflict do nothing'
    ]);
