-- Resolving what is ambiguous.
--
-- `ambiguous` stays terminal: the state machine (command_transitions, the
-- commands_guard trigger) and the history's hash chain are untouched. What an
-- operator (or the kind's reconcile probe, asked again on an operator's
-- request) later learned about the effect is recorded beside the command, in
-- an append-only table: at most one resolution per command, with its
-- evidence, who recorded it and when, chained to the command's last history
-- entry (the ambiguous one) by hash, so `verify` can check it too.
--
-- Nothing is retried: a resolution says what happened downstream; if the
-- effect did not run and should, that is a new command, submitted knowingly.

create table command_resolutions (
    command_id  uuid primary key,
    outcome     text not null,
    evidence    text not null,
    reference   text,
    source      text not null,
    actor       text not null,
    at          timestamptz not null default now(),
    anchor_hash bytea not null,
    hash        bytea not null,
    constraint command_resolutions_outcome check (outcome in ('applied', 'not_applied')),
    constraint command_resolutions_source check (source in ('operator', 'probe')),
    constraint command_resolutions_evidence_length check (char_length(evidence) between 1 and 2000),
    constraint command_resolutions_reference_length check (char_length(reference) between 1 and 200)
);

comment on table command_resolutions is
    'What became of ambiguous commands, learned after they ended: at most one resolution per command, '
    'append-only, chained by hash to the command''s ambiguous history entry. The command stays ambiguous; '
    'rows outlive pruning (no foreign key) as the record of what was decided.';
comment on column command_resolutions.command_id is 'The ambiguous command (commands.id).';
comment on column command_resolutions.outcome is 'applied: the effect ran; not_applied: it never ran.';
comment on column command_resolutions.evidence is 'What says so, in words (for example "provider says applied").';
comment on column command_resolutions.reference is 'The provider''s reference for the effect, when there is one (for example rf_123).';
comment on column command_resolutions.source is 'operator: recorded by hand; probe: the kind''s reconcile probe answered, asked by an operator.';
comment on column command_resolutions.actor is 'Who recorded it (operator:<name>).';
comment on column command_resolutions.at is 'When it was recorded.';
comment on column command_resolutions.anchor_hash is 'hash of the command''s last history entry (its ambiguous entry) when the resolution was recorded.';
comment on column command_resolutions.hash is 'SHA-256 of the resolution''s canonical text, anchor included (ledger_resolution_hash): verify recomputes it.';

create function ledger_resolution_hash(anchor_hash bytea, command_id uuid, outcome text, evidence text,
                                       reference text, source text, actor text, at timestamptz)
returns bytea
language sql stable parallel safe as $$
    select sha256(convert_to(jsonb_build_array(
        'resolution-v1', encode(anchor_hash, 'hex'), command_id, outcome, evidence, reference, source, actor,
        ledger_utc(at))::text, 'UTF8'))
$$;

comment on function ledger_resolution_hash(bytea, uuid, text, text, text, text, text, timestamptz) is
    'SHA-256 of the canonical text of a resolution including its anchor (the ambiguous entry''s hash).';

-- The command must be ambiguous now; the time, anchor and hash are the
-- database's, whatever the insert says.
create function command_resolutions_admit() returns trigger
language plpgsql security definer set search_path = public, pg_temp as $$
declare
    current_state text;
begin
    select c.state into current_state from commands c where c.id = new.command_id for share;
    if current_state is null then
        raise exception 'no command %', new.command_id using errcode = 'CL012';
    end if;
    if current_state <> 'ambiguous' then
        raise exception 'command % is %, not ambiguous: only an ambiguous command is resolved', new.command_id,
            current_state using errcode = 'CL012';
    end if;
    new.at := now();
    new.anchor_hash := (select h.hash from command_history h where h.command_id = new.command_id
                        order by h.id desc limit 1);
    new.hash := ledger_resolution_hash(new.anchor_hash, new.command_id, new.outcome, new.evidence,
                                       new.reference, new.source, new.actor, new.at);
    return new;
end;
$$;

comment on function command_resolutions_admit() is
    'Before insert on command_resolutions: refuses (CL012) a command that is not ambiguous; sets at, anchor_hash and hash.';

create trigger command_resolutions_admit
    before insert on command_resolutions
    for each row execute function command_resolutions_admit();

create function refuse_resolution_change() returns trigger
language plpgsql security definer set search_path = public, pg_temp as $$
begin
    raise exception 'command_resolutions is append-only'
        using errcode = 'CL003';
end;
$$;

comment on function refuse_resolution_change() is
    'Refuses update, delete and truncate on command_resolutions: a recorded resolution is evidence.';

create trigger command_resolutions_append_only
    before update or delete on command_resolutions
    for each row execute function refuse_resolution_change();

create trigger command_resolutions_no_truncate
    before truncate on command_resolutions
    for each statement execute function refuse_resolution_change();

-------------------------------------------------------------------------------
-- Search (GET /v1/commands?kind=&key=&authority=): an index leading with each
-- filter, then the id (the keyset order). These columns never change after
-- insertion, and no index names the state (see 0013), so transitions stay
-- HOT updates. A principal is served by commands_scope_id_idx; a time range
-- by the primary key (ids are UUIDv7, time-ordered).
-------------------------------------------------------------------------------

create index commands_kind_id_idx on commands (kind, id desc);
comment on index commands_kind_id_idx is 'Search by kind, newest first (immutable columns: transitions stay HOT).';
create index commands_authority_id_idx on commands (authority_id, id desc);
comment on index commands_authority_id_idx is 'Search by authority, newest first (immutable columns: transitions stay HOT).';
create index commands_key_idx on commands (idempotency_key);
comment on index commands_key_idx is 'Search by idempotency key across scopes, for operators (immutable column: transitions stay HOT).';

-- Roles (0016): the API records resolutions (an operator's, or its probe's
-- answer); every reader of the ledger may read them.
grant select, insert on command_resolutions to ledger_api;
grant select on command_resolutions to ledger_custodian, ledger_inspector, ledger_retention;
