-- Holds: near-duplicate intents kept for a human decision instead of being
-- recorded as commands. Releasing one records its command (before any
-- dispatch, like every command); rejecting it records nothing else.

create table holds (
    id               uuid primary key,
    scope            uuid not null references principals (id),
    kind             text not null,
    authority_id     text not null,
    pinned_generation bigint,
    run_id           text,
    args             jsonb not null,
    canonical        jsonb not null,
    canonical_rules  text[] not null default '{}',
    request_digest   bytea not null,
    intent_digest    bytea not null,
    digest_version   smallint not null,
    deadline_at      timestamptz,
    resembles        uuid not null references commands (id),
    state            text not null default 'open',
    created_at       timestamptz not null default now(),
    decided_at       timestamptz,
    decided_by       text,
    decision_reason  text,
    command_id       uuid references commands (id),
    constraint holds_state_known check (state in ('open', 'released', 'rejected')),
    constraint holds_decided_iff_not_open check ((state = 'open') = (decided_at is null and decided_by is null)),
    constraint holds_released_has_command check ((state = 'released') = (command_id is not null)),
    constraint holds_digests_are_sha256 check (octet_length(request_digest) = 32 and octet_length(intent_digest) = 32)
);

comment on table holds is
    'Near-duplicate intents (the same intent from another run, after the coalescing window) held for a human. '
    'Released: a command was recorded for it. Rejected: nothing was.';
comment on column holds.id is 'Hold identifier (UUID v7).';
comment on column holds.scope is 'The principal that sent the request.';
comment on column holds.kind is 'Kind of the held request.';
comment on column holds.authority_id is 'Authority of the held request.';
comment on column holds.pinned_generation is 'Pinned authority generation of the held request, if any.';
comment on column holds.run_id is 'Run id of the held request.';
comment on column holds.args is 'Arguments as received.';
comment on column holds.canonical is 'Canonical form of the request.';
comment on column holds.canonical_rules is 'Canonicalizer rules that fired.';
comment on column holds.request_digest is 'Request digest (with run id); a retry of the same held request finds this hold.';
comment on column holds.intent_digest is 'Intent digest, equal to that of the command it resembles.';
comment on column holds.digest_version is 'Canonicalizer version of the digests.';
comment on column holds.deadline_at is 'Deadline of the held request, carried to the command on release.';
comment on column holds.resembles is 'The earlier command with the same intent.';
comment on column holds.state is 'open | released | rejected.';
comment on column holds.created_at is 'When the request was held.';
comment on column holds.decided_at is 'When an operator decided.';
comment on column holds.decided_by is 'Which operator decided (operator:<name>).';
comment on column holds.decision_reason is 'Why, as the operator said.';
comment on column holds.command_id is 'The command recorded when the hold was released.';

-- A retried held request finds its open hold instead of making another.
create unique index holds_open_request_unique on holds (scope, request_digest) where state = 'open';
create index holds_state_created_idx on holds (state, created_at desc);

create function holds_guard() returns trigger
language plpgsql as $$
begin
    if tg_op = 'DELETE' then
        raise exception 'holds are kept: hold % cannot be deleted', old.id using errcode = 'CL006';
    end if;
    if old.state <> 'open' then
        raise exception 'hold % is % and cannot change', old.id, old.state using errcode = 'CL006';
    end if;
    if (new.id, new.scope, new.kind, new.authority_id, new.args, new.canonical, new.request_digest,
        new.intent_digest, new.resembles, new.created_at)
       is distinct from
       (old.id, old.scope, old.kind, old.authority_id, old.args, old.canonical, old.request_digest,
        old.intent_digest, old.resembles, old.created_at) then
        raise exception 'hold % request columns are immutable', old.id using errcode = 'CL006';
    end if;
    return new;
end;
$$;

create trigger holds_guard
    before update or delete on holds
    for each row execute function holds_guard();

create view holds_awaiting_decision as
select h.id, h.kind, h.authority_id, h.run_id, h.created_at, now() - h.created_at as waiting_for,
       h.resembles, c.state as resembles_state, p.name as principal
from holds h
join principals p on p.id = h.scope
join commands c on c.id = h.resembles
where h.state = 'open'
order by h.created_at;

comment on view holds_awaiting_decision is 'Open holds, oldest first, with the command each resembles.';
