-- The identity digest written at submit (issue 54): the service computes
-- identity-v2 where it assembles a command (src/domain/identity.rs, the
-- text of ledger_identity_digest byte for byte) and stores it with the
-- pending row, with the created_at it hashed, so that the claim reads it
-- instead of hashing the row's arguments. A row inserted without one
-- (hand-typed SQL, an engine's next attempt, a row of an older release) is
-- hashed by the claim as before. Nothing here changes a rule: verify still
-- recomputes the digest from the columns and never reads the stored one.
comment on column commands.identity_digest is
    'SHA-256 of the immutable columns (identity-v2, ledger_identity_digest): written with the pending row by the service (0050), or by the first engine step that moves a command inserted without it (0030); row-v2 history digests cover it and the columns a transition changes. A cache: verify recomputes it from the columns and never reads it, so a stored digest that differs is reported, not trusted.';

comment on column commands.created_at is
    'When the command was recorded: the service''s clock at admission, to the microsecond (0050; the time the identity digest covers), or the inserting transaction''s start when the insert names none.';
