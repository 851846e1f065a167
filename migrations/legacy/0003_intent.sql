-- Intent admission: the intent digest (the request without its run id) and
-- the canonicalizer's explanation, stored with every command.

alter table commands add column intent_digest bytea;
alter table commands add constraint commands_intent_digest_is_sha256
    check (intent_digest is null or octet_length(intent_digest) = 32);
alter table commands add column canonical_rules text[] not null default '{}';

comment on column commands.intent_digest is
    'SHA-256 of the canonical intent: kind, authority and canonical args, without the run id. '
    'Equal for every spelling of one intent; null for rows of digest version 1.';
comment on column commands.canonical_rules is
    'The canonicalizer rules that fired on the args, as rule@path (money@/amount, drop_volatile@/trace_id, ...).';

-- Keyless submissions and the near-duplicate guard look commands up by intent.
create index commands_scope_intent_idx on commands (scope, intent_digest, created_at desc)
    where intent_digest is not null;

create or replace function commands_intent_immutable() returns trigger
language plpgsql as $$
begin
    if new.intent_digest is distinct from old.intent_digest
       or new.canonical_rules is distinct from old.canonical_rules then
        raise exception 'command % intent columns are immutable', old.id
            using errcode = 'CL003';
    end if;
    return new;
end;
$$;

create trigger commands_intent_immutable
    before update on commands
    for each row execute function commands_intent_immutable();
