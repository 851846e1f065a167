#!/usr/bin/env bash
# Storage v3 (issue 54): what storing the identity digest at submit costs
# the insert. 2,000 commands inserted in one statement as the API's batch
# insert does (every trigger of today's insert path runs: the guard, the
# pending entries, the queue rows), with identity_digest null (today) and
# computed in the statement (ledger_identity_digest over the same values),
# rounds interleaved, each rolled back; EXPLAIN ANALYZE's execution time.
# Since 0050 the API computes the digest and sends it: with GIVEN=1,
# "identity given" is that insert (a 32-byte value a row, computed by
# nothing), and "generator alone" the statement's own row generator without
# the insert, to subtract. Each rolled-back round leaves its rows dead, so
# later rounds slow down: vacuum first, and compare within a run.
#
#   [GIVEN=1] insert.sh <url of the scratch database profile.sh filled> [rounds]
set -euo pipefail
url="$1"; rounds="${2:-8}"
round() { # identity expression [generator alone]
    psql -X -At -v ON_ERROR_STOP=1 "$url" <<SQL | python3 -c '
import re, sys
t = [float(x) for x in re.findall(r"\"Execution Time\": ([0-9.]+)", sys.stdin.read())]
print(f"{t[-1]:.1f} ms, {t[-1] * 1000 / 2000:.1f} us/command")'
begin;
select set_config('command_ledger.actor', 'api:proto', true) \g /dev/null
explain (analyze, format json)
${2:-insert into commands (id, scope, idempotency_key, request_digest, digest_version, kind, authority_id,
                      args, canonical, intent_digest, canonical_rules, created_at, identity_digest)}
select v.id, v.scope, v.key, v.request_digest, 3, 'refund', 'proto', v.args, v.canonical, v.intent_digest,
       '{money@/amount}', v.at, $1
from (
    select gen_random_uuid() as id, '00000000-0000-0000-0000-000000000001'::uuid as scope,
           'ins-' || g || '-' || random() as key, sha256(('r' || g || random())::bytea) as request_digest,
           jsonb_build_object('to', 'ada' || g || '@example.com', 'amount', '12.00 USD') as args,
           jsonb_build_object('kind', 'refund', 'authority', 'proto',
                              'args', jsonb_build_object('to', 'ada' || g || '@example.com',
                                                         'amount', jsonb_build_object('amount_minor', 1200,
                                                                                      'currency', 'USD')))
               as canonical,
           sha256(('i' || g || random())::bytea) as intent_digest, now() as at
    from generate_series(1, 2000) g
) v;
rollback;
SQL
}
identity="ledger_identity_digest(v.id, v.scope, v.key, v.request_digest, 3, 'refund', 'proto', null, v.args, v.canonical, v.at, null, null, v.intent_digest, '{money@/amount}', null)"
given="v.intent_digest"  # any 32 bytes the statement already holds
for r in $(seq "$rounds"); do
    echo "round $r insert, identity null      $(round null)"
    echo "round $r insert, identity computed  $(round "$identity")"
    if [ -n "${GIVEN:-}" ]; then
        echo "round $r insert, identity given     $(round "$given")"
        echo "round $r generator alone            $(round "$given" " ")"
    fi
done
