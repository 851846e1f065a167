-- Ambiguous outcomes are rare and each one needs a person: keep them findable
-- (and countable, for /metrics and alerts) without reading the whole ledger.
create index commands_ambiguous_idx on commands (finished_at) where state = 'ambiguous';

comment on index commands_ambiguous_idx is
    'Ambiguous commands by when they ended: the operator''s list and the ambiguous count stay cheap as the ledger grows.';
