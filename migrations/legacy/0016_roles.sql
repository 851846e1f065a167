-- Least-privilege roles. Until now every process connected as the role in
-- DATABASE_URL, which owned the tables (and could disable their triggers) or
-- was a superuser. From here on:
--
--   ledger_owner      owns every object of the ledger and runs the migrations
--                     (db::migrate switches to it); not a superuser
--   ledger_api        the HTTP API: inserts pending commands and holds, decides
--                     holds, cancels, reads; nothing else
--   ledger_custodian  custodians and recovery: leases, the transitions from
--                     pending on (never to cancelled); no insert, no delete
--   ledger_inspector  reads everything but token hashes; writes nothing
--   ledger_retention  prunes, through prune_commands() only
--
-- Roles are global to the cluster while the ledger lives in one database, so
-- they are created only when missing (one cluster may hold many ledger
-- databases, such as the tests' one per test: they share the roles, each
-- database grants them its own objects). They are created NOLOGIN: who may
-- log in as which, with which password, is set outside migrations
-- (`command-ledger role-password`, or the private cluster, which does it with
-- random passwords).
--
-- Every trigger function, and every function that writes the history, the
-- archive or the coalesced requests, is SECURITY DEFINER, owned by
-- ledger_owner, with search_path pinned to public, pg_temp: only those
-- functions (running as the owner) write command_history, pruned_commands,
-- coalesced_requests, command_queue and command_in_flight; no other role is
-- granted a write on them. Only the owner (and a superuser) can disable a
-- trigger or alter a table; session_replication_role needs a superuser.

-------------------------------------------------------------------------------
-- The roles, created when missing.
-------------------------------------------------------------------------------

do $migration$
declare
    wanted constant text[] := array['ledger_owner', 'ledger_api', 'ledger_custodian',
                                    'ledger_inspector', 'ledger_retention'];
    missing text[];
    r text;
    can_create boolean;
    is_super boolean;
begin
    select array_agg(w order by w) into missing
    from unnest(wanted) w
    where not exists (select 1 from pg_roles where rolname = w);
    select rolcreaterole, rolsuper into can_create, is_super from pg_roles where rolname = current_user;
    if missing is not null then
        if not (can_create or is_super) then
            raise exception 'the roles % do not exist, and % may not create them (it has no CREATEROLE)',
                array_to_string(missing, ', '), current_user
                using errcode = 'CL010',
                      hint = format('Have an administrator run, once per cluster: %s; then grant %s to %I; '
                                    'then migrate again (docs/SECURITY.md, "Roles").',
                                    (select string_agg(format('create role %I nologin', m), '; ') from unnest(missing) m),
                                    array_to_string(wanted, ', '), current_user);
        end if;
        foreach r in array missing loop
            execute format('create role %I nologin', r);
        end loop;
    end if;
    -- Whoever migrates acts as the owner (db::migrate sets the role) and may
    -- act as each service role (a service given only this URL sets theirs).
    if not is_super then
        foreach r in array wanted loop
            if not pg_has_role(current_user, r, 'member') then
                begin
                    execute format('grant %I to %I', r, current_user);
                exception when insufficient_privilege then
                    raise exception '% is not a member of %, and may not make itself one', current_user, r
                        using errcode = 'CL010',
                              hint = format('Have an administrator run: grant %s to %I; then migrate again.',
                                            array_to_string(wanted, ', '), current_user);
                end;
            end if;
        end loop;
    end if;
end
$migration$;

-------------------------------------------------------------------------------
-- Nothing for PUBLIC; the owner creates in the schema.
-------------------------------------------------------------------------------

grant usage, create on schema public to ledger_owner;
grant usage on schema public to ledger_api, ledger_custodian, ledger_inspector, ledger_retention;

-------------------------------------------------------------------------------
-- The actor of a hand-typed change was 'sql:' || current_user; inside the
-- security-definer triggers current_user is the owner. It is now the role the
-- session acts as (SET ROLE's, else the login), whatever function runs.
-------------------------------------------------------------------------------

create or replace function ledger_actor() returns text
language sql stable as $$
    select coalesce(nullif(current_setting('command_ledger.actor', true), ''),
                    'sql:' || coalesce(nullif(current_setting('role', true), 'none'), session_user::text))
$$;

comment on function ledger_actor() is
    'Actor for history rows: setting command_ledger.actor, else sql:<the role the session acts as>.';

-------------------------------------------------------------------------------
-- Coalesced requests are written through one function, which checks that the
-- command named is of the request's scope and authority.
-------------------------------------------------------------------------------

create function ledger_remember_coalesced(p_authority_id text, p_scope uuid, p_request_digest bytea,
                                          p_command_id uuid, p_run_id text) returns void
language plpgsql as $$
begin
    if not exists (select 1 from commands c
                   where c.id = p_command_id and c.scope = p_scope and c.authority_id = p_authority_id) then
        raise exception 'command % is not of scope % and authority %', p_command_id, p_scope, p_authority_id
            using errcode = 'CL009';
    end if;
    insert into coalesced_requests (authority_id, scope, request_digest, command_id, run_id)
    values (p_authority_id, p_scope, p_request_digest, p_command_id, p_run_id)
    on conflict do nothing;
end;
$$;

comment on function ledger_remember_coalesced(text, uuid, bytea, uuid, text) is
    'Remembers that a request (scope, authority, request digest, run id) was answered with a command of the same '
    'scope and authority (CL009 otherwise); the only way a service role writes coalesced_requests.';

-------------------------------------------------------------------------------
-- Principals, their fleets and tokens are kept like the ledger's other rows:
-- truncate would erase which credentials existed (revoke a token instead).
-------------------------------------------------------------------------------

create function refuse_credentials_truncate() returns trigger
language plpgsql as $$
begin
    raise exception '% is kept: revoke tokens instead of truncating', tg_table_name
        using errcode = 'CL011';
end;
$$;

comment on function refuse_credentials_truncate() is
    'Refuses truncate on principals, fleets and api_tokens: the history names principals, and a token is revoked, not erased.';

create trigger principals_kept before truncate on principals
    for each statement execute function refuse_credentials_truncate();
create trigger fleets_kept before truncate on fleets
    for each statement execute function refuse_credentials_truncate();
create trigger api_tokens_kept before truncate on api_tokens
    for each statement execute function refuse_credentials_truncate();

-------------------------------------------------------------------------------
-- Everything the migrations made goes to the owner. Functions in PL/pgSQL
-- (the triggers, prune_commands, ledger_remember_coalesced) run as the owner
-- with a pinned search_path; the SQL helpers stay invoker functions the
-- planner can inline (they read no table).
-------------------------------------------------------------------------------

do $migration$
declare
    obj record;
begin
    for obj in
        select c.oid::regclass as name, c.relkind
        from pg_class c
        where c.relnamespace = 'public'::regnamespace and c.relkind in ('r', 'p', 'v', 'm')
    loop
        execute format('alter %s %s owner to ledger_owner',
                       case obj.relkind when 'v' then 'view' when 'm' then 'materialized view' else 'table' end,
                       obj.name);
    end loop;
    for obj in
        select p.oid::regprocedure as name, l.lanname
        from pg_proc p join pg_language l on l.oid = p.prolang
        where p.pronamespace = 'public'::regnamespace
    loop
        execute format('alter function %s owner to ledger_owner', obj.name);
        if obj.lanname = 'plpgsql' then
            execute format('alter function %s security definer set search_path = public, pg_temp', obj.name);
        end if;
    end loop;
end
$migration$;

-- Functions are executable by PUBLIC by default: the two that write as the
-- owner on request are not.
revoke all on function prune_commands(interval, integer) from public;
revoke all on function ledger_remember_coalesced(text, uuid, bytea, uuid, text) from public;
grant execute on function prune_commands(interval, integer) to ledger_retention;
grant execute on function ledger_remember_coalesced(text, uuid, bytea, uuid, text) to ledger_api;

-------------------------------------------------------------------------------
-- What each role may do with the tables.
-------------------------------------------------------------------------------

-- Read-only reference data and views, for every service role.
grant select on command_states, command_transitions, command_counts_by_state, command_oldest_in_flight,
    holds_awaiting_decision
    to ledger_api, ledger_custodian, ledger_inspector, ledger_retention;

-- The API: records (commands, holds), decides holds, cancels, reads.
grant select on commands, command_history, holds, coalesced_requests, pruned_commands, authorities,
    principals, fleets, api_tokens, command_queue, command_in_flight
    to ledger_api;
grant insert on commands, holds to ledger_api;
grant update on holds to ledger_api;
grant update (state, error) on commands to ledger_api;

-- Custodians: leases, and the transitions of the commands they hold.
grant select on commands, command_history, holds, authorities, command_queue, command_in_flight
    to ledger_custodian;
grant update on commands to ledger_custodian;
grant insert, update on authorities to ledger_custodian;
-- select ... for update (claiming) needs an update privilege; an update
-- itself is refused by the tables' triggers (CL008).
grant update (id) on command_queue, command_in_flight to ledger_custodian;

-- The inspector: everything but token hashes.
grant select on commands, command_history, holds, coalesced_requests, pruned_commands, authorities,
    principals, fleets, command_queue, command_in_flight
    to ledger_inspector;
grant select (id, principal_id, prefix, created_at, expires_at, revoked_at) on api_tokens to ledger_inspector;

-- Retention: prune_commands() (above), and what it reports from.
grant select on commands, pruned_commands to ledger_retention;

-- A process given only its role's URL checks that the database is migrated
-- to its version before it starts (sqlx's table, when sqlx migrated).
do $migration$
begin
    if to_regclass('_sqlx_migrations') is not null then
        grant select on _sqlx_migrations to ledger_api, ledger_custodian, ledger_inspector, ledger_retention;
    end if;
end
$migration$;

-------------------------------------------------------------------------------
-- Which rows of commands a role may change: the API only cancels (a pending
-- or prepared command, to cancelled); a custodian never cancels. The owner
-- (and so every trigger and prune_commands()) is not bound by these policies.
-------------------------------------------------------------------------------

alter table commands enable row level security;

create policy commands_read on commands for select
    to ledger_api, ledger_custodian, ledger_inspector, ledger_retention
    using (true);
create policy commands_record on commands for insert to ledger_api
    with check (state = 'pending');
create policy commands_cancel on commands for update to ledger_api
    using (state in ('pending', 'prepared'))
    with check (state = 'cancelled');
create policy commands_advance on commands for update to ledger_custodian
    using (true)
    with check (state <> 'cancelled');

comment on policy commands_cancel on commands is
    'The API changes a command only to cancel it, from pending or prepared.';
comment on policy commands_advance on commands is
    'A custodian moves commands along the state machine (commands_guard) but never cancels one.';
