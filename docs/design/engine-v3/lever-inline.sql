-- Lever: the row-v2 digest declared STABLE (to_char of a timestamp is), so the planner inlines it.
alter function ledger_row_digest_v2(bytea, text, bigint, jsonb, jsonb, timestamptz) stable;
