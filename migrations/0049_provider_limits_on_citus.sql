-- Limits per provider on Citus (issue 55; docs/design/execution-policies.md,
-- "On Citus"). There a claim runs on the worker holding its authority's
-- shards, as ledger_engine, which may not log in: it cannot reach the
-- groups' rows, which every authority shares. So on Citus:
-- - each authority's shards say which group each kind belongs to
--   (authority_provider_kinds, written by the delegated engine step
--   ledger_regroup_authority for the authorities of a custodian whose
--   catalog names them), and a new command's queue row takes its group
--   from there, on its own shard;
-- - the groups' rows stay on the coordinator (provider_limits, 0048), and
--   so do the places their commands hold in flight (provider_places): a
--   custodian's claim of a group's commands is one transaction that locks
--   the groups and reads their room on the coordinator
--   (ledger_provider_rooms), claims on the worker within that room (the
--   claim's p_rooms), and holds a place and spends a token for each command
--   it started (ledger_provider_hold). A place goes when its command's
--   outcome is recorded (ledger_provider_release); a custodian's periodic
--   reconciliation frees the places of its authorities' commands no longer
--   in flight and takes one for a command in flight without one.
-- On one node both tables stay empty: provider_kinds and command_in_flight
-- serve.
-- The claim of one authority takes the rooms its groups have (p_rooms): its
-- file creates it with the new argument. First: on Citus a function's drop
-- must come before any parallel statement on a distributed table in the
-- transaction.
drop function ledger_claim_start_authority(text, text, integer);

create table authority_provider_kinds (
    authority_id text not null,
    kind text not null,
    provider text not null,
    primary key (authority_id, kind)
);

comment on table authority_provider_kinds is
    'On Citus: which provider group each kind belongs to at one authority, on the authority''s own shard, so that a new command''s queue row takes its group there (commands_record_insert_row). Written only by the engine step ledger_regroup_authority, for the authorities of a custodian whose catalog names the group, when it starts. Empty on one node (provider_kinds serves).';
comment on column authority_provider_kinds.authority_id is 'The authority (commands.authority_id).';
comment on column authority_provider_kinds.kind is 'A kind of the custodian''s catalog.';
comment on column authority_provider_kinds.provider is 'The group (provider_limits.name) its commands are claimed under at this authority.';

create trigger authority_provider_kinds_follow_the_catalog
    before insert or update or delete on authority_provider_kinds
    for each statement when (current_user <> 'ledger_engine') execute function refuse_provider_change();
create trigger authority_provider_kinds_kept
    before truncate on authority_provider_kinds
    for each statement execute function refuse_provider_change();

create table provider_places (
    authority_id text not null,
    command_id uuid not null,
    provider text not null references provider_limits (name),
    held_at timestamptz not null default now(),
    primary key (authority_id, command_id)
);

create index provider_places_by_provider on provider_places (provider);

comment on table provider_places is
    'On Citus: one row per command of a provider group claimed and not known to be terminal, on the coordinator beside provider_limits: the group''s commands in flight, which its max_in_flight bounds. Written only by the engine steps ledger_provider_hold (in the claim''s transaction) and ledger_provider_release (after the outcome is recorded, or when a custodian finds the command no longer in flight). Empty on one node (command_in_flight is counted there).';
comment on column provider_places.authority_id is 'The command''s authority.';
comment on column provider_places.command_id is 'The command (commands.id) that holds the place.';
comment on column provider_places.provider is 'The group whose place it holds (provider_limits.name); ledger_set_providers frees the places of a group it removes.';
comment on column provider_places.held_at is 'When the place was taken.';

create trigger provider_places_follow_the_claims
    before insert or update or delete on provider_places
    for each statement when (current_user <> 'ledger_engine') execute function refuse_provider_change();
create trigger provider_places_kept
    before truncate on provider_places
    for each statement execute function refuse_provider_change();

grant select on authority_provider_kinds, provider_places to ledger_api, ledger_custodian, ledger_inspector;
grant select, insert, update, delete on authority_provider_kinds, provider_places to ledger_engine;

-- The engine moves an authority's queued commands to their kind's group
-- (ledger_regroup_authority); on Citus it had no right to update the queue.
grant update (provider) on command_queue to ledger_engine;

insert into ledger_distribution (position, table_name, method, distribution_column, colocate_with)
values (32, 'authority_provider_kinds', 'distributed', 'authority_id', 'commands');

