-- Failures that free their intent. When a command of an intent ended with
-- nothing done (failed: not dispatched, refused by the target, or not
-- applied by the reconcile probe; expired; cancelled) and the kind's
-- on_failure is `release`, the next request of that intent from another
-- run records a new command of the intent (the next epoch). It names the
-- command it retries. `ambiguous` never frees its intent.

alter table commands add column retry_of uuid;

comment on column commands.retry_of is
    'The command of the same intent this one retries: that one ended failed, expired or cancelled with nothing done, '
    'and the kind releases such intents (on_failure = release). Null otherwise. Not a foreign key: the retried '
    'command may be pruned first.';

create function commands_retry_of_immutable() returns trigger
language plpgsql as $$
begin
    raise exception 'command % retry_of is immutable', old.id
        using errcode = 'CL003';
end;
$$;

comment on function commands_retry_of_immutable() is
    'Refuses any change of commands.retry_of after insert.';

create trigger commands_retry_of_immutable
    before update of retry_of on commands
    for each row
    when (new.retry_of is distinct from old.retry_of)
    execute function commands_retry_of_immutable();
