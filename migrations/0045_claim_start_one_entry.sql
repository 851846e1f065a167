-- One history entry for a claim that starts its command (issue 54;
-- docs/design/storage-v3.md). The engine's claim moves a command from
-- pending through prepared to effect_started in one transaction, at one
-- instant, and wrote an entry for each transition: the two entries had the
-- same time, actor, generation and reason. It now writes one, from pending
-- to effect_started, that names the state it passed through (`through`),
-- hashed as entry-v2 (ledger_entry_hash_v2), which covers that name; the
-- constraint admits no other use of it. Every entry written before keeps
-- its form and its hash (entry-v1, `through` null), and verify reads both.
alter table command_history
    add column through text;

alter table command_history
    add constraint command_history_through_prepared
    check (through is null or (from_state = 'pending' and through = 'prepared' and to_state = 'effect_started'));

comment on column command_history.through is
    'The state the command passed through within this entry, or null. Only the engine''s claim sets it: one entry for pending -> prepared -> effect_started, both transitions in one transaction at one instant, hashed as entry-v2 (ledger_entry_hash_v2). Readers that list transitions (the API''s history, verify) take such an entry as its two transitions.';
