#!/usr/bin/env bash
# Storage v3 (issue 54): what one call of each history hash costs alone, in
# microseconds a row, over 100,000 generated rows (EXPLAIN ANALYZE of a
# count over a temporary table, less nothing: "base" is the count alone).
# On a scratch database where seal.sql is loaded (profile.sh ... hashing).
#
#   hash-cost.sh <url> [rounds]
#
# row_v2, entry_v2   the service's row digest and entry hash (jsonb_build_array(...)::text)
# proto5_row/entry   seal.sql's fixed concatenation of the same fields
# sha_only           sha256() of 32 bytes
set -euo pipefail
url="$1"; rounds="${2:-3}"
run() { # name, expression over inp
    psql -X -At -v ON_ERROR_STOP=1 "$url" <<SQL | grep -o '"Execution Time": [0-9.]*' |
create temp table inp as
select gen_random_uuid() as id, decode(md5(g::text) || md5(g::text), 'hex') as prev,
       decode(md5((g + 1)::text) || md5(g::text), 'hex') as ident, clock_timestamp() as at,
       'custodian:payments-worker-1'::text as actor, 7::bigint as gen,
       jsonb_build_object('refund_id', 'rf_' || g) as result
from generate_series(1, 100000) g;
explain (analyze, format json) select $2 from inp;
SQL
        awk -v n="$1" '{ printf "%-12s %.2f us/row\n", n, $3 * 1000 / 100000 }'
}
for r in $(seq "$rounds"); do
    run base "count(id)"
    run sha_only "count(sha256(prev))"
    run row_v2 "count(ledger_row_digest_v2(ident, 'applied', gen, result, null, at))"
    run proto5_row "count(proto5_row_digest(ident, 'applied', gen, result, null, at))"
    run entry_v2 "count(ledger_entry_hash_v2(prev, id, 'pending', 'prepared', 'effect_started', at, actor, gen, null, prev))"
    run proto5_entry "count(proto5_entry_hash(prev, id, 'pending', 'prepared', 'effect_started', at, actor, gen, null, prev))"
done
