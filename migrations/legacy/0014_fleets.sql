-- Fleets: principals that share one dedup space. A principal belongs to
-- exactly one fleet; per kind, the catalog's `dedup_scope` says whether
-- idempotency keys and intent fingerprints are unique per fleet (the
-- default) or per principal, and a command's `scope` is then the fleet's id
-- or the principal's. Reads and cancels follow the same scope: a device sees
-- the commands of its own scope and of its fleet's, never another fleet's.
--
-- Every principal that exists already forms a fleet of its own whose id is
-- the principal's id, so the commands it recorded (scope = its id) are its
-- fleet's as well: nothing changes for it.

create table fleets (
    id         uuid primary key,
    name       text not null,
    created_at timestamptz not null default now(),
    constraint fleets_name_unique unique (name),
    constraint fleets_name_format check (name ~ '^[A-Za-z0-9][A-Za-z0-9_.@:-]{0,127}$')
);

comment on table fleets is
    'Groups of principals (agents, workers of one tenant) that share one dedup space for the kinds whose '
    'dedup_scope is fleet: two members racing one intent make one command.';
comment on column fleets.id is
    'Stable identifier; commands.scope holds it for commands of fleet-scoped kinds. '
    'A principal alone in its fleet has a fleet id equal to its own id.';
comment on column fleets.name is 'Name given with token create --fleet (by default the first principal''s name), unique.';
comment on column fleets.created_at is 'When the fleet was created.';

insert into fleets (id, name, created_at)
select id, name, created_at from principals;

alter table principals add column fleet_id uuid;
update principals set fleet_id = id;
alter table principals alter column fleet_id set not null;
alter table principals add constraint principals_fleet_fkey foreign key (fleet_id) references fleets (id);
create index principals_fleet_idx on principals (fleet_id);

comment on column principals.fleet_id is
    'The fleet the principal belongs to (fixed at creation): its dedup space for fleet-scoped kinds, '
    'and whose commands it may read.';
comment on column principals.id is
    'Stable identifier; commands.scope holds it for commands of principal-scoped kinds.';

-- A scope is now a principal's id or a fleet's id: the foreign keys to
-- principals no longer describe it.
alter table commands drop constraint commands_scope_fkey;
alter table holds drop constraint holds_scope_fkey;
alter table coalesced_requests drop constraint coalesced_requests_scope_fkey;

comment on column commands.scope is
    'The dedup space the command was recorded in: the submitting principal''s fleet id (kinds with '
    'dedup_scope = fleet) or its principal id (dedup_scope = principal). Keys are unique per scope, never globally.';
comment on column holds.scope is 'The dedup space of the held request (a fleet id or a principal id, as commands.scope).';
comment on column coalesced_requests.scope is 'The dedup space of the request (as commands.scope).';

-- Open holds name the fleet or the principal whose scope they are in.
create or replace view holds_awaiting_decision as
select h.id, h.kind, h.authority_id, h.run_id, h.created_at, now() - h.created_at as waiting_for,
       h.resembles, c.state as resembles_state, coalesce(p.name, f.name) as principal
from holds h
left join principals p on p.id = h.scope
left join fleets f on f.id = h.scope
join commands c on c.id = h.resembles
where h.state = 'open'
order by h.created_at;

comment on view holds_awaiting_decision is
    'Open holds, oldest first, with the command each resembles and the principal (or fleet) whose scope holds them.';

-- A principal inserted without a fleet (by hand, or by a tool that predates
-- fleets) forms a fleet of its own, as the command line does.
create function principals_own_fleet() returns trigger
language plpgsql as $$
begin
    if new.fleet_id is null then
        insert into fleets (id, name) values (new.id, new.name) on conflict (name) do nothing;
        new.fleet_id := (select id from fleets where name = new.name);
    end if;
    return new;
end;
$$;

comment on function principals_own_fleet() is
    'Before insert on principals: a principal given no fleet gets one of its own (id = its id, name = its name).';

create trigger principals_own_fleet
    before insert on principals
    for each row execute function principals_own_fleet();
