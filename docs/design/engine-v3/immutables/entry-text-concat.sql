-- A prototype measured and NOT taken (docs/runs/engine-levers-not-taken.txt): the
-- entry hash and row digest over a concatenated text instead of a JSON array
-- (create or replace inside the measuring transaction, rolled back).

create or replace function ledger_entry_hash(prev_hash bytea, command_id uuid, from_state text, to_state text, at timestamptz, actor text, authority_generation bigint, reason text, row_digest bytea) returns bytea
language sql immutable parallel safe as $$
 select sha256(convert_to(concat_ws(chr(31), 'entry-v2', encode(prev_hash,'hex'), command_id::text, from_state, to_state, extract(epoch from at)::text, actor, authority_generation::text, reason, encode(row_digest,'hex')), 'UTF8')) $$;
create or replace function ledger_row_digest_v2(identity bytea, state text, generation bigint, result jsonb, error jsonb, finished_at timestamptz) returns bytea
language sql immutable parallel safe as $$
 select sha256(convert_to(concat_ws(chr(31), 'row-v3', encode(identity,'hex'), state, generation::text, result::text, error::text, extract(epoch from finished_at)::text), 'UTF8')) $$;
