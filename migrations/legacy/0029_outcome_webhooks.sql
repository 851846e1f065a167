-- Outcome webhooks: a principal or a fleet registers an endpoint, and when a
-- command of its scope reaches a terminal state an event is written in the
-- same transaction as the outcome, then sent (signed) by a deliverer until
-- the receiver answers 2xx or the event expires (docs/WEBHOOKS.md).
--
-- The event is written by the database, like the history: a crash between
-- the outcome's commit and the delivery cannot lose it, and SQL typed by
-- hand that finishes a command produces its events too.
--
-- Its payload carries the hash of the command's terminal history entry.
-- On one node that entry is written by the statement-level trigger
-- commands_record_changes (0023, 0025), which fires after every row-level
-- AFTER trigger of the same statement: a row trigger cannot see it yet. The
-- events are therefore written by a *deferred* constraint trigger, which
-- runs at the commit, inside the transaction, once the statement triggers
-- are done: the entry is there and the event still commits with the
-- outcome or not at all. On Citus the history is written by a row-level
-- trigger (commands_record_change_row); there the distribution step swaps
-- in a plain row-level trigger whose name sorts after it, which PostgreSQL
-- fires after it (same-event triggers fire in name order).
--
-- Cost for commands of scopes without an endpoint: the trigger is queued
-- only for a row whose state became terminal (its WHEN clause: claims and
-- starts queue nothing), and then runs one index probe of
-- webhook_endpoints_by_scope, which finds nothing.

-------------------------------------------------------------------------------
-- A UUIDv7 (time-ordered) in SQL: PostgreSQL 15 has no uuidv7().
-------------------------------------------------------------------------------

create function ledger_uuid_v7() returns uuid
language sql volatile as $$
    -- The 48-bit Unix time in milliseconds over the first six bytes of a
    -- random (v4) UUID; setting bits 52 and 53 turns its version 4 into 7.
    select encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
                                          placing substring(int8send(floor(extract(epoch from clock_timestamp()) * 1000)::bigint)
                                                            from 3)
                                          from 1 for 6),
                                  52, 1),
                          53, 1),
                  'hex')::uuid
$$;

comment on function ledger_uuid_v7() is
    'A new UUID version 7 (RFC 9562): milliseconds since the Unix epoch, then random bits; ids made later sort later.';

-------------------------------------------------------------------------------
-- Endpoints.
-------------------------------------------------------------------------------

create table webhook_endpoints (
    id          uuid primary key,
    scope       uuid not null,
    url         text not null,
    kinds       text[],
    states      text[],
    secret      text not null,
    created_at  timestamptz not null default now(),
    created_by  text not null,
    disabled_at timestamptz,
    constraint webhook_endpoints_url_length check (char_length(url) between 1 and 2048),
    constraint webhook_endpoints_kinds_not_empty check (cardinality(kinds) > 0),
    constraint webhook_endpoints_states_terminal check (
        cardinality(states) > 0 and states <@ array['applied', 'failed', 'ambiguous', 'cancelled', 'expired']),
    constraint webhook_endpoints_secret_length check (char_length(secret) >= 32)
);

comment on table webhook_endpoints is
    'Where a principal or a fleet wants the outcomes of its commands pushed: each command of the scope that reaches '
    'a terminal state (of the kinds and states asked for) becomes a webhook_events row. Registered with POST '
    '/v1/webhooks; disabled, never deleted, with DELETE /v1/webhooks/{id}.';
comment on column webhook_endpoints.id is 'Stable identifier (UUIDv7, made by the API).';
comment on column webhook_endpoints.scope is
    'The dedup space whose commands it receives, matched against commands.scope: the registering principal''s fleet '
    'id (commands of kinds with dedup_scope = fleet, any member''s) or its own id (kinds with dedup_scope = '
    'principal), as the registration asked; admission decides which scope a command is recorded in.';
comment on column webhook_endpoints.url is
    'Where events are POSTed: http or https, no user name or password; not an address of the ledger''s own '
    'network (loopback, private, link-local, unique-local, and their IPv4-mapped forms) unless the operator allows '
    'private targets. Checked at registration and again when each connection is made.';
comment on column webhook_endpoints.kinds is 'Only commands of these kinds (null: every kind).';
comment on column webhook_endpoints.states is 'Only these terminal states (null: all five).';
comment on column webhook_endpoints.secret is
    'The HMAC-SHA256 key events are signed with (Ledger-Signature), kept so that deliverers can sign; shown to the '
    'registrant once, never listed, and not readable by ledger_inspector.';
comment on column webhook_endpoints.created_at is 'When it was registered.';
comment on column webhook_endpoints.created_by is 'Who registered it, as history names actors (device:<name>, operator:<name>).';
comment on column webhook_endpoints.disabled_at is
    'When it was disabled: no new events from then on; events already written are still delivered.';

create index webhook_endpoints_by_scope on webhook_endpoints (scope) where disabled_at is null;

comment on index webhook_endpoints_by_scope is
    'The one probe the outcome trigger makes for a terminal command: live endpoints of its scope.';

-------------------------------------------------------------------------------
-- Events: one per (terminal command, matching endpoint).
-------------------------------------------------------------------------------

create table webhook_events (
    id              uuid primary key,
    authority_id    text not null,
    endpoint_id     uuid not null,
    command_id      uuid not null,
    payload         jsonb not null,
    created_at      timestamptz not null default now(),
    expires_at      timestamptz,
    next_attempt_at timestamptz default now(),
    attempts        integer not null default 0,
    delivered_at    timestamptz,
    state           text not null default 'pending',
    last_error      text,
    constraint webhook_events_state_known check (state in ('pending', 'delivered', 'expired')),
    constraint webhook_events_delivered_iff_delivered_at check ((state = 'delivered') = (delivered_at is not null)),
    constraint webhook_events_pending_iff_scheduled check ((state = 'pending') = (next_attempt_at is not null)),
    constraint webhook_events_attempts_non_negative check (attempts >= 0)
);

comment on table webhook_events is
    'An outcome to push: written by the commands_webhook_events trigger in the transaction that made the command '
    'terminal, one per matching endpoint; sent by a deliverer (serve, custodian) until a 2xx (delivered) or its '
    'expiry (expired). An operator may redeliver one (POST /v1/webhooks/events/{id}/redeliver). Not a foreign key '
    'to commands: a command may be pruned before its events are.';
comment on column webhook_events.id is
    'UUIDv7; sent as Ledger-Event-Id and as the body''s event_id: the key a receiver drops duplicates by, since '
    'delivery is at least once.';
comment on column webhook_events.authority_id is
    'The command''s authority: the column the ledger is distributed by, so an event lives on its command''s shard.';
comment on column webhook_events.endpoint_id is
    'The webhook_endpoints row it is sent to (no foreign key: on Citus the events are distributed and the '
    'endpoints a reference table; endpoints are never deleted).';
comment on column webhook_events.command_id is 'The command whose outcome it reports.';
comment on column webhook_events.payload is
    'What is sent, beside event_id and created_at: command_id, key, kind, authority, state, result, error, '
    'finished_at, and history_hash (hex), the hash of the command''s terminal command_history entry, which '
    '`verify` recomputes.';
comment on column webhook_events.created_at is 'When the command became terminal (the outcome''s transaction).';
comment on column webhook_events.expires_at is
    'After this no attempt is made and the event is expired: set by the first deliverer that takes it up (the '
    'time of that first attempt plus its --webhook-expiry), and again by a redelivery. Null until then.';
comment on column webhook_events.next_attempt_at is
    'While pending: when it is due. A deliverer that takes it up moves this past its request''s timeout (a '
    'lease: if the deliverer dies mid-send, another sends it again after that). Null once delivered or expired.';
comment on column webhook_events.attempts is 'How many attempts were started (webhook_attempts holds each one that finished).';
comment on column webhook_events.delivered_at is 'When a receiver answered 2xx.';
comment on column webhook_events.state is 'pending (to send), delivered (a 2xx came back) or expired (no more attempts).';
comment on column webhook_events.last_error is 'What the last failed attempt, or the expiry, said.';

create index webhook_events_due on webhook_events (next_attempt_at) where state = 'pending';
create index webhook_events_by_endpoint on webhook_events (endpoint_id, id);

comment on index webhook_events_due is 'Pending events by when they are due: what deliverers claim.';
comment on index webhook_events_by_endpoint is 'An endpoint''s events, newest last (ids are time-ordered).';

-------------------------------------------------------------------------------
-- Attempts: one row per finished attempt.
-------------------------------------------------------------------------------

create table webhook_attempts (
    authority_id text not null,
    event_id     uuid not null,
    n            integer not null,
    at           timestamptz not null,
    status       integer,
    error        text,
    duration_ms  integer not null,
    constraint webhook_attempts_pkey primary key (event_id, n),
    constraint webhook_attempts_n_positive check (n > 0),
    constraint webhook_attempts_duration_non_negative check (duration_ms >= 0),
    constraint webhook_attempts_status_or_error check (status is not null or error is not null)
);

comment on table webhook_attempts is
    'Each finished attempt to send a webhook_events row: when, what the receiver answered (or why nothing came '
    'back), how long it took. Written by the deliverer that made it.';
comment on column webhook_attempts.authority_id is 'The event''s authority (the distribution column, as webhook_events).';
comment on column webhook_attempts.event_id is 'The event sent.';
comment on column webhook_attempts.n is 'Which attempt (1 for the first), as sent in Ledger-Attempt.';
comment on column webhook_attempts.at is 'When the request was sent.';
comment on column webhook_attempts.status is 'The HTTP status the receiver answered (null: no answer).';
comment on column webhook_attempts.error is
    'Why it failed: the address refused by the URL rule, the connection, the timeout, or the non-2xx status.';
comment on column webhook_attempts.duration_ms is 'From the connection to the answer (or the failure), in milliseconds.';

-------------------------------------------------------------------------------
-- The trigger.
-------------------------------------------------------------------------------

create function commands_webhook_events() returns trigger
language plpgsql security definer set search_path = public, pg_temp as $$
declare
    endpoint record;
    entry_hash bytea;
    body jsonb;
    event_id uuid;
begin
    -- Live endpoints of the command's scope: for a scope without any, this
    -- one probe of webhook_endpoints_by_scope is all the trigger costs.
    for endpoint in
        select e.id from webhook_endpoints e
        where e.scope = new.scope and e.disabled_at is null
          and (e.kinds is null or new.kind = any (e.kinds))
          and (e.states is null or new.state = any (e.states))
        order by e.id
    loop
        if body is null then
            -- The terminal entry, written by the history trigger before this
            -- one runs (see the head of migration 0029). A terminal state has
            -- no way out, so there is exactly one entry into it.
            select h.hash into entry_hash from command_history h
            where h.authority_id = new.authority_id and h.command_id = new.id and h.to_state = new.state
            order by h.command_id desc, h.id desc
            limit 1;
            body := jsonb_build_object(
                'command_id', new.id,
                'key', new.idempotency_key,
                'kind', new.kind,
                'authority', new.authority_id,
                'state', new.state,
                'result', new.result,
                'error', new.error,
                'finished_at', new.finished_at,
                'history_hash', encode(entry_hash, 'hex'));
        end if;
        -- Computed first: on a Citus shard the insert then names constants only.
        event_id := ledger_uuid_v7();
        insert into webhook_events (id, authority_id, endpoint_id, command_id, payload)
        values (event_id, new.authority_id, endpoint.id, new.id, body);
    end loop;
    return null;
end;
$$;

comment on function commands_webhook_events() is
    'After a command''s state becomes terminal: one webhook_events row per live endpoint of its scope that asks for '
    'its kind and state, with the hash of its terminal history entry, in the outcome''s transaction. One index probe '
    'when the scope has no endpoint.';

-- One node: deferred to the commit, after the statement-level history
-- trigger. On Citus the distribution step (and, on a ledger distributed
-- already, this block) makes it a plain row-level trigger, fired after the
-- row-level history trigger by name.
do $migration$
declare
    distributed boolean := false;
begin
    -- pg_dist_partition exists only with the citus extension: asked by
    -- dynamic SQL, so that one node never plans a query naming it.
    if to_regclass('pg_dist_partition') is not null then
        execute 'select exists (select 1 from pg_dist_partition where logicalrelid = ''commands''::regclass)'
            into distributed;
    end if;
    if distributed then
        perform set_config('citus.enable_unsafe_triggers', 'on', true);
        create trigger commands_webhook_events
            after update of state on commands
            for each row
            when (old.state is distinct from new.state
                  and new.state in ('applied', 'failed', 'ambiguous', 'cancelled', 'expired'))
            execute function commands_webhook_events();
    else
        create constraint trigger commands_webhook_events
            after update of state on commands
            deferrable initially deferred
            for each row
            when (old.state is distinct from new.state
                  and new.state in ('applied', 'failed', 'ambiguous', 'cancelled', 'expired'))
            execute function commands_webhook_events();
    end if;
end
$migration$;

-------------------------------------------------------------------------------
-- Kept like the ledger's other rows: what was registered, and what was sent
-- when, is not erased by a truncate (disable an endpoint instead).
-------------------------------------------------------------------------------

create function refuse_webhook_truncate() returns trigger
language plpgsql security definer set search_path = public, pg_temp as $$
begin
    raise exception '% is kept: disable an endpoint instead of truncating', tg_table_name
        using errcode = 'CL014';
end;
$$;

comment on function refuse_webhook_truncate() is
    'Refuses truncate on webhook_endpoints, webhook_events and webhook_attempts (CL014): endpoints are disabled, '
    'and what was sent, when, stays on record.';

create trigger webhook_endpoints_kept before truncate on webhook_endpoints
    for each statement execute function refuse_webhook_truncate();
create trigger webhook_events_kept before truncate on webhook_events
    for each statement execute function refuse_webhook_truncate();
create trigger webhook_attempts_kept before truncate on webhook_attempts
    for each statement execute function refuse_webhook_truncate();

-------------------------------------------------------------------------------
-- Roles (0016): the API registers, disables, lists and redelivers; the
-- deliverers (in serve, as ledger_api; in custodian processes, as
-- ledger_custodian) read the secret to sign, and record attempts; the
-- inspector reads everything but the secret. No role deletes.
-------------------------------------------------------------------------------

grant select on webhook_endpoints to ledger_api, ledger_custodian;
grant insert on webhook_endpoints to ledger_api;
grant update (disabled_at) on webhook_endpoints to ledger_api;
grant select (id, scope, url, kinds, states, created_at, created_by, disabled_at) on webhook_endpoints
    to ledger_inspector;

grant select on webhook_events, webhook_attempts to ledger_api, ledger_custodian, ledger_inspector;
grant update (state, attempts, next_attempt_at, expires_at, delivered_at, last_error) on webhook_events
    to ledger_api, ledger_custodian;
grant insert on webhook_attempts to ledger_api, ledger_custodian;

-------------------------------------------------------------------------------
-- Citus (0019): endpoints on every node (the shards' trigger reads them),
-- events and attempts beside their commands. commands' trigger becomes the
-- row-level form when commands is distributed.
-------------------------------------------------------------------------------

update ledger_distribution
set rekey = rekey || array[
    'drop trigger commands_webhook_events on commands',
    'create trigger commands_webhook_events after update of state on commands for each row when (old.state is distinct from new.state and new.state in (''applied'', ''failed'', ''ambiguous'', ''cancelled'', ''expired'')) execute function commands_webhook_events()'
]
where table_name = 'commands';

insert into ledger_distribution (position, table_name, method, distribution_column, colocate_with, rekey) values
    (16, 'webhook_endpoints', 'reference', null, null, '{}'),
    (30, 'webhook_events', 'distributed', 'authority_id', 'commands', array[
        'alter table webhook_events drop constraint webhook_events_pkey',
        'alter table webhook_events add constraint webhook_events_pkey primary key (authority_id, id)'
    ]),
    (31, 'webhook_attempts', 'distributed', 'authority_id', 'commands', array[
        'alter table webhook_attempts drop constraint webhook_attempts_pkey',
        'alter table webhook_attempts add constraint webhook_attempts_pkey primary key (authority_id, event_id, n)'
    ]);
