-- Retention: finished commands past a retention window are pruned in bounded
-- batches. Pruning archives each command with its whole history first, then
-- deletes both; the database refuses any other way of deleting them.

create table pruned_commands (
    id              uuid primary key,
    scope           uuid not null,
    idempotency_key text not null,
    kind            text not null,
    authority_id    text not null,
    state           text not null,
    created_at      timestamptz not null,
    finished_at     timestamptz not null,
    pruned_at       timestamptz not null default now(),
    pruned_by       text not null,
    record          jsonb not null
);

comment on table pruned_commands is
    'What pruning kept of each command it removed: the identifying columns, and the row with its full history as one JSON document.';
comment on column pruned_commands.record is
    '{"command": the commands row, "history": [its command_history rows, oldest first]} as they were when pruned.';
comment on column pruned_commands.pruned_by is 'The actor that pruned it (setting command_ledger.actor, else sql:<user>).';

create index pruned_commands_scope_key_idx on pruned_commands (scope, idempotency_key);

create function refuse_archive_change() returns trigger
language plpgsql as $$
begin
    raise exception 'pruned_commands is append-only'
        using errcode = 'CL003';
end;
$$;

create trigger pruned_commands_append_only
    before update or delete or truncate on pruned_commands
    for each statement execute function refuse_archive_change();

-- A command may be deleted only once archived (and, as before, only when terminal).
create or replace function commands_guard_delete() returns trigger
language plpgsql as $$
begin
    if not exists (select 1 from pruned_commands where id = old.id) then
        raise exception 'command % is deleted only by prune_commands(), which archives it first', old.id
            using errcode = 'CL002';
    end if;
    return old;
end;
$$;

create trigger commands_archived_before_delete
    before delete on commands
    for each row execute function commands_guard_delete();

-- History stays append-only, except that it leaves with its (archived) command.
drop trigger command_history_append_only on command_history;
create trigger command_history_append_only
    before update or truncate on command_history
    for each statement execute function refuse_history_change();

create function command_history_delete_guard() returns trigger
language plpgsql as $$
begin
    if exists (select 1 from commands where id = old.command_id) then
        raise exception 'command_history is append-only'
            using errcode = 'CL003';
    end if;
    return old;
end;
$$;

create trigger command_history_leaves_with_its_command
    before delete on command_history
    for each row execute function command_history_delete_guard();

alter table command_history drop constraint command_history_command_id_fkey;
alter table command_history add constraint command_history_command_id_fkey
    foreign key (command_id) references commands (id) on delete cascade;

-- One bounded batch: the oldest finished commands that finished before
-- now() - older_than and that no hold refers to; archived, then deleted
-- (their history with them). Returns how many. Run it repeatedly, each call
-- in its own transaction, until it returns 0: `command-ledger prune` does.
create function prune_commands(older_than interval, max_rows integer) returns integer
language plpgsql as $$
declare
    ids uuid[];
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
                                    from command_history h where h.command_id = c.id), '[]'::jsonb))
    from commands c
    where c.id = any(ids);
    delete from commands where id = any(ids);
    return cardinality(ids);
end;
$$;

comment on function prune_commands(interval, integer) is
    'Archives into pruned_commands, then deletes, at most max_rows finished commands that finished more than older_than ago (and that no hold refers to), with their history.';
