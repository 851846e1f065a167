-- The epoch of a command within its intent: the how-many-th command of the
-- same intent in the same scope. A unique index makes concurrent copies of
-- one intent collide even when they carry different client keys (the
-- opt-in near-duplicate guard for keyed kinds).

alter table commands add column intent_epoch integer;
alter table commands add constraint commands_intent_epoch_positive check (intent_epoch > 0);

comment on column commands.intent_epoch is
    'For commands admitted under the intent guard: which command of this intent (1, 2, ...) it is in its scope. '
    'Unique per (scope, intent_digest); null for commands admitted by key alone.';

create unique index commands_scope_intent_epoch_unique on commands (scope, intent_digest, intent_epoch)
    where intent_epoch is not null;

create or replace function commands_intent_immutable() returns trigger
language plpgsql as $$
begin
    if new.intent_digest is distinct from old.intent_digest
       or new.canonical_rules is distinct from old.canonical_rules
       or new.intent_epoch is distinct from old.intent_epoch then
        raise exception 'command % intent columns are immutable', old.id
            using errcode = 'CL003';
    end if;
    return new;
end;
$$;
