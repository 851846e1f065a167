-- Retries of failures with nothing done (issue 55;
-- docs/design/execution-policies.md). Each attempt is a command of its own:
-- the engine's record step writes the next attempt in the transaction that
-- records the failure it follows, as pending, not claimed before the
-- policy's wait. `attempt` says which attempt of its chain a command is
-- (1 for every command a caller submitted); an attempt after the first names
-- the chain's first command in `retry_of`, so that both ends of a chain are
-- one index probe away. Written once, by the engine; commands_guard refuses
-- a hand-typed insert of a later attempt and any change after.
alter table commands
    add column attempt integer not null default 1;

alter table commands
    add constraint commands_attempt_follows_its_chain
    check (attempt >= 1 and (attempt = 1 or retry_of is not null));

comment on column commands.attempt is
    'Which attempt of its chain the command is: 1 for a command a caller submitted, n > 1 for one the record step scheduled after attempt n - 1 failed with nothing done (the kind''s retry policy); such a command names the chain''s first command in retry_of.';

-- A chain's attempts in order, from its first command: its last attempt
-- (what a key, a wait and a replay answer with) and each attempt's successor.
create index commands_attempts on commands (authority_id, retry_of, attempt) where attempt > 1;

comment on index commands_attempts is
    'The attempts after the first of each chain, by the chain''s first command (retry_of) and attempt: a chain''s last attempt, and an attempt''s successor, in one probe.';

-- The record step (ledger_record_outcomes, owned by ledger_engine) writes
-- the next attempt.
grant insert on table commands to ledger_engine;
