#!/usr/bin/env bash
# profile-with.sh <url> <prelude.sql> [rounds]: profile.sh v3's two steps (128 commands, EXPLAIN ANALYZE,
# SERIALIZABLE, rolled back) after the prelude has run in the same transaction; prints claim-start,
# record and their total in ms per round. An empty prelude measures the database as it is.
url="$1"; prelude="$2"; rounds="${3:-6}"
for r in $(seq $rounds); do
out=$( { echo "begin isolation level serializable;"; cat "$prelude"; cat <<'SQL'
select set_config('command_ledger.actor', 'custodian:proto', true) \g /dev/null
select count(*) from ledger_claim_start(array['proto'], 'proto-holder', 128) \g /dev/null
select count(*) from ledger_record_outcomes('proto', 1,
    (select jsonb_agg(jsonb_build_object('id', f.id, 'state', 'applied')) from command_in_flight f
     where f.authority_id = 'proto')) \g /dev/null
explain (analyze, format json) select * from ledger_claim_start(array['proto'], 'proto-holder', 128);
explain (analyze, format json)
select * from ledger_record_outcomes('proto', 1,
    (select jsonb_agg(jsonb_build_object('id', c.id, 'state', 'applied',
                                         'result', jsonb_build_object('refund_id', 'rf_' || left(c.id::text, 8))))
     from command_in_flight f join commands c on c.authority_id = f.authority_id and c.id = f.id
     where f.authority_id = 'proto'));
rollback;
SQL
} | psql -X -At -v ON_ERROR_STOP=1 "$url" 2>&1)
python3 - "$out" <<'PY'
import re, sys
t=[float(x) for x in re.findall(r'"Execution Time": ([0-9.]+)', sys.argv[1])]
print(" ".join(f"{x:.2f}" for x in t), f"total {sum(t):.2f}" if t else sys.argv[1][-300:])
PY
done
