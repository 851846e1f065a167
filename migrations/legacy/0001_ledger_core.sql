-- The ledger core: states and transitions as data, the commands table, the
-- trigger-written history, authorities, principals and their tokens, and the
-- first inspection views.
--
-- The database enforces the state machine itself (not only the application),
-- so that SQL typed by hand in psql is checked and audited exactly like the
-- service's own statements.

-------------------------------------------------------------------------------
-- States and transitions (DESIGN section 2), as data.
-------------------------------------------------------------------------------

create table command_states (
    state       text primary key,
    position    smallint not null unique,
    terminal    boolean not null,
    description text not null
);

comment on table command_states is
    'Every state a command can be in. Mirrors the Rust enum domain::State; a test keeps them identical.';
comment on column command_states.state is 'State name, as stored in commands.state.';
comment on column command_states.position is 'Order of the state along the life of a command, for listings.';
comment on column command_states.terminal is 'True when no transition leaves this state; the row is then immutable.';
comment on column command_states.description is 'What the state means, for operators reading the schema.';

insert into command_states (state, position, terminal, description) values
    ('pending',        1, false, 'Recorded and durable; no custodian has claimed it yet.'),
    ('prepared',       2, false, 'Claimed by a custodian and bound to an authority generation; no effect attempted.'),
    ('effect_started', 3, false, 'Durably marked before the effect was dispatched; the effect may have run.'),
    ('applied',        4, true,  'The effect ran and the executor confirmed it.'),
    ('failed',         5, true,  'The effect definitely did not happen, or the provider definitely refused it.'),
    ('ambiguous',      6, true,  'The effect was dispatched and nobody can know whether it ran. Never retried automatically.'),
    ('cancelled',      7, true,  'Cancelled before any effect was attempted.'),
    ('expired',        8, true,  'Its deadline passed (or its pinned authority generation was superseded) before any effect was attempted.');

create table command_transitions (
    from_state text not null references command_states (state),
    to_state   text not null references command_states (state),
    constraint command_transitions_pkey primary key (from_state, to_state)
);

comment on table command_transitions is
    'The allowed state changes. The commands trigger refuses any other; mirrors domain::TRANSITIONS.';
comment on column command_transitions.from_state is 'State the command leaves.';
comment on column command_transitions.to_state is 'State the command enters.';

insert into command_transitions (from_state, to_state) values
    ('pending',        'prepared'),
    ('pending',        'cancelled'),
    ('pending',        'expired'),
    ('prepared',       'effect_started'),
    ('prepared',       'cancelled'),
    ('prepared',       'expired'),
    ('effect_started', 'applied'),
    ('effect_started', 'failed'),
    ('effect_started', 'ambiguous');

-- The state tables are reference data: editing them would change the meaning
-- of every stored row, so they are frozen after this migration. A later
-- migration that needs to change them drops this trigger first, explicitly.
create function refuse_reference_data_change() returns trigger
language plpgsql as $$
begin
    raise exception 'table % is reference data and cannot be changed outside a migration', tg_table_name
        using errcode = 'CL004';
end;
$$;

create trigger command_states_frozen
    before insert or update or delete or truncate on command_states
    for each statement execute function refuse_reference_data_change();
create trigger command_transitions_frozen
    before insert or update or delete or truncate on command_transitions
    for each statement execute function refuse_reference_data_change();

-------------------------------------------------------------------------------
-- Principals and their API tokens.
-------------------------------------------------------------------------------

create table principals (
    id         uuid primary key,
    name       text not null,
    role       text not null,
    created_at timestamptz not null default now(),
    constraint principals_name_unique unique (name),
    constraint principals_name_format check (name ~ '^[A-Za-z0-9][A-Za-z0-9_.@:-]{0,127}$'),
    constraint principals_role_known check (role in ('device', 'operator'))
);

comment on table principals is
    'Authenticated callers. A device submits and sees only its own commands; an operator sees all.';
comment on column principals.id is 'Stable identifier; commands.scope refers to it.';
comment on column principals.name is 'Human name given at token creation, unique.';
comment on column principals.role is 'device | operator.';
comment on column principals.created_at is 'When the principal was first created.';

create table api_tokens (
    id           uuid primary key,
    principal_id uuid not null references principals (id),
    token_hash   bytea not null,
    prefix       text not null,
    created_at   timestamptz not null default now(),
    expires_at   timestamptz,
    revoked_at   timestamptz,
    constraint api_tokens_hash_unique unique (token_hash),
    constraint api_tokens_hash_is_sha256 check (octet_length(token_hash) = 32)
);

comment on table api_tokens is
    'Bearer tokens. Only the SHA-256 of a token is stored; the token itself is shown once at creation.';
comment on column api_tokens.id is 'Token identifier.';
comment on column api_tokens.principal_id is 'The principal this token authenticates.';
comment on column api_tokens.token_hash is 'SHA-256 of the full token string.';
comment on column api_tokens.prefix is 'The first characters of the token, to recognise it in listings; not a secret.';
comment on column api_tokens.created_at is 'When the token was issued.';
comment on column api_tokens.expires_at is 'When the token stops being accepted; null for no expiry.';
comment on column api_tokens.revoked_at is 'When the token was revoked; a revoked token is never accepted again.';

-------------------------------------------------------------------------------
-- Authorities: the executors that may run effects, with fencing generations.
-------------------------------------------------------------------------------

create table authorities (
    id               text primary key,
    generation       bigint not null default 0,
    lease_holder     text,
    lease_expires_at timestamptz,
    updated_at       timestamptz not null default now(),
    constraint authorities_generation_non_negative check (generation >= 0),
    constraint authorities_lease_complete check ((lease_holder is null) = (lease_expires_at is null))
);

comment on table authorities is
    'One row per authority (executor) that custodians lease. The generation is a fencing token.';
comment on column authorities.id is 'Authority name, as named by commands.authority_id.';
comment on column authorities.generation is
    'Fencing token: incremented whenever the lease changes hands or is retaken after expiry; never decreases, never reused.';
comment on column authorities.lease_holder is 'Identity of the custodian holding the lease; null when free.';
comment on column authorities.lease_expires_at is 'When the current lease lapses unless renewed.';
comment on column authorities.updated_at is 'Last change to the row.';

create function authorities_guard() returns trigger
language plpgsql as $$
begin
    if new.generation < old.generation then
        raise exception 'authority % generation cannot decrease (% -> %)', old.id, old.generation, new.generation
            using errcode = 'CL005';
    end if;
    new.updated_at := now();
    return new;
end;
$$;

create trigger authorities_guard
    before update on authorities
    for each row execute function authorities_guard();

-------------------------------------------------------------------------------
-- Commands.
-------------------------------------------------------------------------------

create table commands (
    id                   uuid primary key,
    scope                uuid not null references principals (id),
    idempotency_key      text not null,
    request_digest       bytea not null,
    digest_version       smallint not null,
    kind                 text not null,
    authority_id         text not null,
    authority_generation bigint,
    run_id               text,
    args                 jsonb not null,
    canonical            jsonb not null,
    state                text not null default 'pending' references command_states (state),
    result               jsonb,
    error                jsonb,
    created_at           timestamptz not null default now(),
    updated_at           timestamptz not null default now(),
    deadline_at          timestamptz,
    finished_at          timestamptz,
    constraint commands_scope_key_unique unique (scope, idempotency_key),
    constraint commands_key_length check (octet_length(idempotency_key) between 1 and 255),
    constraint commands_digest_is_sha256 check (octet_length(request_digest) = 32),
    constraint commands_kind_format check (kind ~ '^[a-z][a-z0-9_.-]{0,63}$'),
    constraint commands_authority_format check (authority_id ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$'),
    constraint commands_generation_non_negative check (authority_generation >= 0),
    constraint commands_finished_iff_terminal check (
        (state in ('applied', 'failed', 'ambiguous', 'cancelled', 'expired')) = (finished_at is not null)
    ),
    constraint commands_prepared_has_generation check (
        state in ('pending', 'cancelled', 'expired') or authority_generation is not null
    ),
    constraint commands_result_only_when_applied check (result is null or state = 'applied')
);

comment on table commands is
    'The ledger: one row per command, written as pending before anything is dispatched.';
comment on column commands.id is 'UUID v7 (time-ordered), assigned by the service.';
comment on column commands.scope is 'The principal that submitted the command; keys are unique per scope, never globally.';
comment on column commands.idempotency_key is 'Client-chosen key (1-255 bytes of printable ASCII); unique within the scope.';
comment on column commands.request_digest is 'SHA-256 of the canonical request (kind, authority, args); decides replay vs conflict.';
comment on column commands.digest_version is 'Version of the canonicalization that produced request_digest, so old rows stay comparable.';
comment on column commands.kind is 'What the command does, e.g. refund; selects the effect executor.';
comment on column commands.authority_id is 'The authority (executor) that may run the effect.';
comment on column commands.authority_generation is
    'Authority generation bound when the command was prepared; null while pending. Fences stale executors.';
comment on column commands.run_id is 'Optional identifier of the client run (agent session) that sent the request.';
comment on column commands.args is 'Arguments as received (parsed JSON).';
comment on column commands.canonical is 'Canonical form of the request the digest was computed over.';
comment on column commands.state is 'Current state; changes are checked by commands_guard against command_transitions.';
comment on column commands.result is 'Executor result, set only when applied.';
comment on column commands.error is 'Why the command failed, became ambiguous, was cancelled or expired.';
comment on column commands.created_at is 'When the pending row was recorded.';
comment on column commands.updated_at is 'Last change to the row (set by the trigger).';
comment on column commands.deadline_at is 'After this instant the command must not start; null for no deadline.';
comment on column commands.finished_at is 'When the command reached a terminal state (set by the trigger); null until then.';

-- Listing a principal's commands newest first (ids are time-ordered).
create index commands_scope_id_idx on commands (scope, id desc);
-- Custodians claim pending rows of their authorities, oldest first.
create index commands_pending_claim_idx on commands (authority_id, id) where state = 'pending';
-- Operators and recovery look at rows in flight; the terminal bulk stays out of this index.
create index commands_in_flight_idx on commands (state, updated_at)
    where state in ('pending', 'prepared', 'effect_started');

-------------------------------------------------------------------------------
-- History: append-only, written by the database on every state change.
-------------------------------------------------------------------------------

create table command_history (
    id                   bigint generated always as identity primary key,
    command_id           uuid not null references commands (id),
    from_state           text references command_states (state),
    to_state             text not null references command_states (state),
    at                   timestamptz not null default now(),
    actor                text not null,
    authority_generation bigint,
    reason               text
);

comment on table command_history is
    'Append-only audit of every state change (and every adoption of a prepared row by a newer generation), written by trigger (so SQL typed by hand is audited too). Updates and deletes are refused.';
comment on column command_history.id is 'Order of the entries.';
comment on column command_history.command_id is 'The command that changed.';
comment on column command_history.from_state is 'State before the change; null for the creation of the command.';
comment on column command_history.to_state is 'State after the change.';
comment on column command_history.at is 'Transaction time of the change.';
comment on column command_history.actor is
    'Who made the change: the setting command_ledger.actor of the transaction, else sql:<database user>.';
comment on column command_history.authority_generation is 'The command''s authority generation after the change.';
comment on column command_history.reason is 'Why, from the setting command_ledger.reason of the transaction; may be null.';

create index command_history_command_idx on command_history (command_id, id);

-- The actor and reason travel as transaction-local settings (set_config(..., true)),
-- so the statement that changes the state also names who did it and why.
create function ledger_actor() returns text
language sql stable as $$
    select coalesce(nullif(current_setting('command_ledger.actor', true), ''), 'sql:' || current_user)
$$;

create function ledger_reason() returns text
language sql stable as $$
    select nullif(current_setting('command_ledger.reason', true), '')
$$;

comment on function ledger_actor() is 'Actor for history rows: setting command_ledger.actor, else sql:<user>.';
comment on function ledger_reason() is 'Reason for history rows: setting command_ledger.reason, or null.';

create function commands_guard() returns trigger
language plpgsql as $$
begin
    if tg_op = 'INSERT' then
        if new.state <> 'pending' then
            raise exception 'a command is created pending, not %', new.state
                using errcode = 'CL001';
        end if;
        new.updated_at := new.created_at;
        return new;
    end if;

    if tg_op = 'DELETE' then
        if old.state in (select state from command_states where not terminal) then
            raise exception 'command % is % and cannot be deleted before it is terminal', old.id, old.state
                using errcode = 'CL002';
        end if;
        return old;
    end if;

    -- UPDATE
    if (select terminal from command_states where state = old.state) then
        raise exception 'command % is % (terminal) and cannot change', old.id, old.state
            using errcode = 'CL002';
    end if;
    if new.id <> old.id or new.scope <> old.scope or new.idempotency_key <> old.idempotency_key
       or new.request_digest <> old.request_digest or new.digest_version <> old.digest_version
       or new.kind <> old.kind or new.authority_id <> old.authority_id
       or new.run_id is distinct from old.run_id or new.args <> old.args
       or new.canonical <> old.canonical or new.created_at <> old.created_at then
        raise exception 'command % identity columns are immutable', old.id
            using errcode = 'CL003';
    end if;
    -- The generation is bound when the command is prepared. Afterwards it may
    -- only move forward, and only while no effect was attempted (a prepared row
    -- adopted by a newer generation of its authority).
    if old.authority_generation is not null
       and new.authority_generation is distinct from old.authority_generation then
        if new.authority_generation is null or new.authority_generation < old.authority_generation
           or old.state <> 'prepared' or new.state <> 'prepared' then
            raise exception 'command % generation % cannot change to % (% -> %)', old.id,
                old.authority_generation, new.authority_generation, old.state, new.state
                using errcode = 'CL003';
        end if;
    end if;
    if new.state <> old.state then
        if not exists (select 1 from command_transitions
                       where from_state = old.state and to_state = new.state) then
            raise exception 'illegal transition % -> % for command %', old.state, new.state, old.id
                using errcode = 'CL001';
        end if;
        if (select terminal from command_states where state = new.state) then
            new.finished_at := coalesce(new.finished_at, now());
        end if;
    end if;
    new.updated_at := now();
    return new;
end;
$$;

create trigger commands_guard
    before insert or update or delete on commands
    for each row execute function commands_guard();

create function commands_record_history() returns trigger
language plpgsql as $$
begin
    if tg_op = 'INSERT' then
        insert into command_history (command_id, from_state, to_state, actor, authority_generation, reason)
        values (new.id, null, new.state, ledger_actor(), new.authority_generation, ledger_reason());
    elsif new.state <> old.state
          or new.authority_generation is distinct from old.authority_generation then
        insert into command_history (command_id, from_state, to_state, actor, authority_generation, reason)
        values (new.id, old.state, new.state, ledger_actor(), new.authority_generation, ledger_reason());
    end if;
    return null;
end;
$$;

create trigger commands_record_history
    after insert or update on commands
    for each row execute function commands_record_history();

create function refuse_history_change() returns trigger
language plpgsql as $$
begin
    raise exception 'command_history is append-only'
        using errcode = 'CL003';
end;
$$;

create trigger command_history_append_only
    before update or delete or truncate on command_history
    for each statement execute function refuse_history_change();

-------------------------------------------------------------------------------
-- Inspection views.
-------------------------------------------------------------------------------

create view command_counts_by_state as
select s.state, s.terminal, count(c.id) as commands
from command_states s
left join commands c on c.state = s.state
group by s.state, s.terminal, s.position
order by s.position;

comment on view command_counts_by_state is 'How many commands are in each state (every state listed, zero included).';

create view command_oldest_in_flight as
select s.state,
       count(c.id)                 as commands,
       min(c.created_at)           as oldest_created_at,
       now() - min(c.created_at)   as oldest_age,
       now() - min(c.updated_at)   as longest_in_state
from command_states s
left join commands c on c.state = s.state
where not s.terminal
group by s.state, s.position
order by s.position;

comment on view command_oldest_in_flight is
    'Per non-terminal state: how many commands, the age of the oldest, and the longest time one has sat in that state.';
