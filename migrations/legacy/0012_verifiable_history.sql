-- A history anyone can verify.
--
-- The triggers refuse to rewrite the history, but a superuser (or a restored
-- backup, or an edit of the data files) is not bound by triggers. Each
-- history entry now carries a SHA-256 hash chaining it to the previous entry
-- of its command, and a digest of the command row as that entry left it, both
-- computed here by the database in the triggers that write the history.
-- `command-ledger verify` recomputes every chain from the entries' own fields
-- (with built-in functions only, not with the functions below, which a
-- superuser could replace) and names every break: an edited entry, a deleted
-- or inserted one, a command row that no longer matches its last entry.
--
-- The chain is per command: a command's entries are written only while its
-- row is locked by the statement that changes it, so the previous entry is
-- always known (one index probe) and concurrent commands never contend on a
-- shared chain head. Pruning archives the history as it is (to_jsonb of each
-- entry, hashes included), so an archived command keeps its chain and its
-- last hash, and a published digest of the chain heads stays checkable after
-- its commands are pruned.
--
-- The canonical texts below are versioned by their shape: changing one is a
-- new migration and a new branch in `verify` (src/db/verify.rs).

alter table command_history add column row_digest bytea;
alter table command_history add column prev_hash bytea;
alter table command_history add column hash bytea;

comment on column command_history.row_digest is
    'SHA-256 of the canonical text of the command row as this change left it (ledger_row_digest); null only for '
    'entries written before migration 0012 that were not their command''s last.';
comment on column command_history.prev_hash is
    'hash of the previous entry of the same command; null for the entry that created it.';
comment on column command_history.hash is
    'SHA-256 of the canonical text of this entry, prev_hash included (ledger_entry_hash): the chain verify recomputes.';

-- Timestamps enter the canonical texts in UTC with microseconds, whatever
-- the session's TimeZone.
create function ledger_utc(t timestamptz) returns text
language sql stable parallel safe as $$
    select to_char(t at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
$$;

comment on function ledger_utc(timestamptz) is
    'A timestamp in the canonical texts of the history chain: UTC, microseconds, independent of TimeZone.';

-- Every column of the row but updated_at (which any no-op update moves).
-- jsonb's text form is canonical (keys ordered, one spelling per value).
create function ledger_row_digest(c commands) returns bytea
language sql stable parallel safe as $$
    select sha256(convert_to(jsonb_build_array(
        'row-v1', c.id, c.scope, c.idempotency_key, encode(c.request_digest, 'hex'), c.digest_version,
        c.kind, c.authority_id, c.authority_generation, c.run_id, c.args, c.canonical, c.state,
        c.result, c.error, ledger_utc(c.created_at), ledger_utc(c.deadline_at), ledger_utc(c.finished_at),
        c.pinned_generation, encode(c.intent_digest, 'hex'), c.canonical_rules, c.intent_epoch)::text, 'UTF8'))
$$;

comment on function ledger_row_digest(commands) is
    'SHA-256 of the canonical text of a command row (every column but updated_at), as stored in command_history.row_digest.';

create function ledger_entry_hash(prev_hash bytea, command_id uuid, from_state text, to_state text,
                                  at timestamptz, actor text, authority_generation bigint, reason text,
                                  row_digest bytea) returns bytea
language sql stable parallel safe as $$
    select sha256(convert_to(jsonb_build_array(
        'entry-v1', encode(prev_hash, 'hex'), command_id, from_state, to_state, ledger_utc(at), actor,
        authority_generation, reason, encode(row_digest, 'hex'))::text, 'UTF8'))
$$;

comment on function ledger_entry_hash(bytea, uuid, text, text, timestamptz, text, bigint, text, bytea) is
    'SHA-256 of the canonical text of a history entry including the previous entry''s hash: command_history.hash.';

-- Creation: the first entry of its command, chained to nothing.
create or replace function commands_record_history() returns trigger
language plpgsql as $$
declare
    at_now timestamptz := now();
    actor text := ledger_actor();
    reason text := ledger_reason();
    digest bytea := ledger_row_digest(new);
begin
    insert into command_history (command_id, from_state, to_state, at, actor, authority_generation, reason,
                                 row_digest, prev_hash, hash)
    values (new.id, null, new.state, at_now, actor, new.authority_generation, reason, digest, null,
            ledger_entry_hash(null, new.id, null, new.state, at_now, actor, new.authority_generation,
                              reason, digest));
    return null;
end;
$$;

comment on function commands_record_history() is
    'After each insert on commands: the command''s first history entry, the head of its hash chain.';

-- Every other change, once per statement as before (0008): each entry is
-- chained to the last entry of its command, found by the (command_id, id)
-- index while the statement still holds the row's lock.
create or replace function commands_record_changes() returns trigger
language plpgsql as $$
begin
    insert into command_history (command_id, from_state, to_state, at, actor, authority_generation, reason,
                                 row_digest, prev_hash, hash)
    select e.id, e.from_state, e.to_state, e.at, e.actor, e.authority_generation, e.reason,
           e.row_digest, e.prev_hash,
           ledger_entry_hash(e.prev_hash, e.id, e.from_state, e.to_state, e.at, e.actor,
                             e.authority_generation, e.reason, e.row_digest)
    from (
        select n.id, o.state as from_state, n.state as to_state, now() as at, ledger_actor() as actor,
               n.authority_generation,
               coalesce(ledger_reason(),
                        case when n.state <> o.state then n.error ->> 'reason' end,
                        case when n.state = o.state then 'adopted by generation ' || n.authority_generation end)
                   as reason,
               ledger_row_digest(n::commands) as row_digest,
               (select h.hash from command_history h where h.command_id = n.id
                order by h.id desc limit 1) as prev_hash
        from new_rows n join old_rows o on o.id = n.id
        where n.state <> o.state or n.authority_generation is distinct from o.authority_generation
    ) e
    order by e.id;

    perform pg_notify('command_ledger_outcome', n.id::text)
    from new_rows n join old_rows o on o.id = n.id
    where n.state <> o.state
      and n.state in ('applied', 'failed', 'ambiguous', 'cancelled', 'expired');
    return null;
end;
$$;

comment on function commands_record_changes() is
    'After each update statement on commands: one chained history entry per changed row (state or generation), '
    'and NOTIFY command_ledger_outcome with the command id for each row that became terminal.';

-------------------------------------------------------------------------------
-- The chains of what is already there: each command's entries in order, the
-- last one carrying the digest of the row as it is now (earlier rows are not
-- known any more). The append-only triggers step aside for this migration
-- only, inside its transaction.
-------------------------------------------------------------------------------

alter table command_history disable trigger command_history_append_only;

do $$
declare
    e record;
    last_command uuid;
    prev bytea;
    digest bytea;
begin
    for e in
        select h.*, c.id is not null and h.id = max(h.id) over (partition by h.command_id) as is_last, c as row
        from command_history h
        left join commands c on c.id = h.command_id
        order by h.command_id, h.id
    loop
        if last_command is distinct from e.command_id then
            prev := null;
            last_command := e.command_id;
        end if;
        digest := case when e.is_last then ledger_row_digest(e.row) end;
        update command_history
        set row_digest = digest,
            prev_hash = prev,
            hash = ledger_entry_hash(prev, e.command_id, e.from_state, e.to_state, e.at, e.actor,
                                     e.authority_generation, e.reason, digest)
        where id = e.id
        returning hash into prev;
    end loop;
end;
$$;

alter table command_history enable trigger command_history_append_only;

-- Archived commands: the same, inside each archive document.
alter table pruned_commands disable trigger pruned_commands_append_only;

do $$
declare
    p record;
    h jsonb;
    chained jsonb;
    prev bytea;
    digest bytea;
    entry command_history;
    n integer;
    i integer;
begin
    for p in select id, record from pruned_commands loop
        chained := '[]'::jsonb;
        prev := null;
        n := jsonb_array_length(p.record -> 'history');
        i := 0;
        for h in select value from jsonb_array_elements(p.record -> 'history') loop
            i := i + 1;
            entry := jsonb_populate_record(null::command_history, h);
            digest := case when i = n
                           then ledger_row_digest(jsonb_populate_record(null::commands, p.record -> 'command')) end;
            entry.row_digest := digest;
            entry.prev_hash := prev;
            entry.hash := ledger_entry_hash(prev, entry.command_id, entry.from_state, entry.to_state, entry.at,
                                            entry.actor, entry.authority_generation, entry.reason, digest);
            prev := entry.hash;
            chained := chained || jsonb_build_array(to_jsonb(entry));
        end loop;
        update pruned_commands set record = jsonb_set(record, '{history}', chained) where id = p.id;
    end loop;
end;
$$;

alter table pruned_commands enable trigger pruned_commands_append_only;

-- Not declared not null: rows written around the triggers (a superuser's
-- replica-mode session, the benchmark's preload) may lack one, and verify
-- names every entry whose hash is missing or wrong.
alter table command_history add constraint command_history_hash_is_sha256 check (
    octet_length(hash) = 32 and (prev_hash is null or octet_length(prev_hash) = 32)
    and (row_digest is null or octet_length(row_digest) = 32));

comment on constraint command_history_hash_is_sha256 on command_history is
    'The chain''s hashes and the row digest are SHA-256 values.';

comment on table command_history is
    'Append-only audit of every state change (and every adoption of a prepared row by a newer generation), written by '
    'trigger (so SQL typed by hand is audited too), each entry hash-chained to the previous entry of its command '
    '(`command-ledger verify` recomputes the chains). Updates and deletes are refused.';
