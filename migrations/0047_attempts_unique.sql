-- One attempt of each number in a chain (issue 55): the index of a chain's
-- attempts becomes unique, so that whatever calls the engine's
-- ledger_next_attempt twice for one failure (a record step retried after a
-- commit whose outcome was unknown, recovery and a custodian racing) writes
-- one attempt, and the second call writes nothing.
drop index commands_attempts;

create unique index commands_attempts on commands (authority_id, retry_of, attempt) where attempt > 1;

comment on index commands_attempts is
    'The attempts after the first of each chain, by the chain''s first command (retry_of) and attempt, one each: a chain''s last attempt, and an attempt''s successor, in one probe.';
