-- Limits per provider (issue 55; docs/design/execution-policies.md): a
-- named group of kinds in the catalog with a maximum in flight and a token
-- bucket (rate and burst), held here so that every custodian process draws
-- from one bucket. The custodian writes its catalog's groups when it starts
-- (the engine step ledger_set_providers); the claim (ledger_claim_start)
-- locks the rows of the groups whose commands wait at its authorities' queue
-- heads, and passes over a group with no room, so its commands stay pending
-- in their place. Nothing else writes these tables.
create table provider_limits (
    name text primary key,
    max_in_flight integer check (max_in_flight is null or max_in_flight >= 1),
    rate double precision check (rate is null or rate > 0),
    burst integer not null default 1 check (burst >= 1),
    tokens double precision not null default 0,
    refilled_at timestamptz not null default now(),
    updated_at timestamptz not null default now(),
    check (max_in_flight is not null or rate is not null)
);

comment on table provider_limits is
    'Limits per provider (a group of kinds in the catalog, [providers.<name>]): written by the custodian from its catalog when it starts (ledger_set_providers), read and drawn from by the claim under a row lock, so that every custodian process shares one bucket. Refuses any other writer (CL017).';
comment on column provider_limits.name is 'The group''s name in the catalog ([providers.<name>]).';
comment on column provider_limits.max_in_flight is
    'The most commands of the group claimed and not terminal at once, across every custodian (null: no such limit).';
comment on column provider_limits.rate is
    'Tokens added per second: the claim starts at most this many of the group''s commands a second, over time (null: no rate limit).';
comment on column provider_limits.burst is
    'The most tokens the bucket holds: how many may start at once after a quiet spell.';
comment on column provider_limits.tokens is
    'Tokens left at refilled_at (each command the claim starts takes one); the claim adds rate per second since, up to burst.';
comment on column provider_limits.refilled_at is 'When tokens was last computed.';
comment on column provider_limits.updated_at is 'When a custodian last wrote the limits from its catalog.';

create table provider_kinds (
    kind text primary key,
    provider text not null references provider_limits (name)
);

comment on table provider_kinds is
    'Which kinds belong to which provider group (the catalog''s provider = "<name>"): written with provider_limits by ledger_set_providers. A new command''s queue row takes its kind''s group from here.';
comment on column provider_kinds.kind is 'A kind of the catalog.';
comment on column provider_kinds.provider is 'The group whose limits its commands are claimed under (provider_limits.name).';

-- The refusal's text is its file's (functions/refuse_provider_change.sql),
-- which migrate applies after this.
create function refuse_provider_change() returns trigger
    language plpgsql as $$ begin raise exception 'refused' using errcode = 'CL017'; end $$;

create trigger provider_limits_follow_the_catalog
    before insert or update or delete on provider_limits
    for each statement when (current_user <> 'ledger_engine') execute function refuse_provider_change();
create trigger provider_limits_kept
    before truncate on provider_limits
    for each statement execute function refuse_provider_change();
create trigger provider_kinds_follow_the_catalog
    before insert or update or delete on provider_kinds
    for each statement when (current_user <> 'ledger_engine') execute function refuse_provider_change();
create trigger provider_kinds_kept
    before truncate on provider_kinds
    for each statement execute function refuse_provider_change();

grant select on provider_limits, provider_kinds to ledger_api, ledger_custodian, ledger_inspector;
grant select, insert, update, delete on provider_limits, provider_kinds to ledger_engine;

-- The queue row carries its command's group, so that the claim reads each
-- group's head, and the head of the commands under no limit, by index: a
-- backlog of a group with no room is passed over without being read.
alter table command_queue add column provider text;

comment on column command_queue.provider is
    'The group whose limits the command is claimed under (provider_kinds, when it was queued or when a custodian''s catalog last changed its kind''s group); null: none.';

create index command_queue_claim_order_unlimited on command_queue (authority_id, rank, id) where provider is null;

comment on index command_queue_claim_order_unlimited is
    'The claim order of the queued commands under no provider limit, per authority.';

create index command_queue_provider_order on command_queue (authority_id, provider, rank, id) where provider is not null;

comment on index command_queue_provider_order is
    'The claim order of the queued commands of each provider group, per authority: the claim reads as many of a group''s head as it has room for.';

drop index command_queue_claim_order;
