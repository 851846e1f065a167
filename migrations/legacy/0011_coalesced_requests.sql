-- Which requests were answered with another request's command.
--
-- Under the intent guard, copies of one intent from other runs within the
-- coalescing window are given the first copy's command (coalesced, or its
-- stored outcome when it had finished). Only that first copy's request digest
-- was stored (commands.request_digest), so after the window a coalesced
-- caller's identical retry looked like a new run of the intent and was held:
-- releasing the hold would have run the effect twice. Each such answer is now
-- remembered here, durably, before it is sent; a retry of the same request
-- (same run, same canonical request) finds the command it was given.

create table coalesced_requests (
    authority_id   text not null,
    scope          uuid not null references principals (id),
    request_digest bytea not null,
    command_id     uuid not null references commands (id) on delete cascade,
    run_id         text,
    answered_at    timestamptz not null default now(),
    constraint coalesced_requests_pkey primary key (authority_id, scope, request_digest, command_id),
    constraint coalesced_requests_digest_is_sha256 check (octet_length(request_digest) = 32)
);

comment on table coalesced_requests is
    'Requests answered with another request''s command under the intent guard (coalesced, or replayed within '
    'the window): a retry of the same request gets that command again, never a hold. Append-only; rows leave '
    'with their command when it is pruned.';
comment on column coalesced_requests.authority_id is 'Authority of the request (and of the command); first key column, so the table partitions like commands by authority.';
comment on column coalesced_requests.scope is 'The principal that sent the request.';
comment on column coalesced_requests.request_digest is 'Request digest (with run id) of the coalesced request; differs from the command''s own.';
comment on column coalesced_requests.command_id is 'The command the request was answered with.';
comment on column coalesced_requests.run_id is 'Run id of the coalesced request, for operators.';
comment on column coalesced_requests.answered_at is 'When the request was first answered with the command.';

-- The reverse lookup: what was answered with a command (pruning, operators).
create index coalesced_requests_command_idx on coalesced_requests (command_id);

create function refuse_coalesced_change() returns trigger
language plpgsql as $$
begin
    raise exception 'coalesced_requests is append-only'
        using errcode = 'CL003';
end;
$$;

comment on function refuse_coalesced_change() is
    'Refuses update and truncate on coalesced_requests: forgetting an answer would hold a retry that must replay.';

create trigger coalesced_requests_append_only
    before update or truncate on coalesced_requests
    for each statement execute function refuse_coalesced_change();

create function coalesced_requests_delete_guard() returns trigger
language plpgsql as $$
begin
    if exists (select 1 from commands where id = old.command_id) then
        raise exception 'coalesced_requests is append-only'
            using errcode = 'CL003';
    end if;
    return old;
end;
$$;

create trigger coalesced_requests_leave_with_their_command
    before delete on coalesced_requests
    for each row execute function coalesced_requests_delete_guard();

-- Pruning archives what was answered with a command beside its history.
create or replace function prune_commands(older_than interval, max_rows integer) returns integer
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
                                    from command_history h where h.command_id = c.id), '[]'::jsonb),
               'coalesced', coalesce((select jsonb_agg(to_jsonb(r) order by r.answered_at)
                                      from coalesced_requests r where r.command_id = c.id), '[]'::jsonb))
    from commands c
    where c.id = any(ids);
    delete from commands where id = any(ids);
    return cardinality(ids);
end;
$$;

comment on function prune_commands(interval, integer) is
    'Archives into pruned_commands, then deletes, at most max_rows finished commands that finished more than older_than ago '
    '(and that no hold refers to), with their history and the requests coalesced into them.';

comment on column pruned_commands.record is
    '{"command": the commands row, "history": [its command_history rows, oldest first], '
    '"coalesced": [the coalesced_requests rows answered with it]} as they were when pruned.';
