#!/usr/bin/env bash
# Storage v3 (issue 54): the database time of one command's claim, start and
# record, as engine-v3/profile.sh measures it (EXPLAIN ANALYZE of 128-row
# steps after a warming batch, each round a SERIALIZABLE transaction rolled
# back, on a scratch database holding :n pending commands of one leased
# authority), for today's steps and the prototype's (proto.sql), each lever
# added to the one before, the variants interleaved round by round; and the
# WAL the two measured steps wrote (pg_current_wal_insert_lsn before and after).
#
#   profile.sh <url of a scratch database at HEAD's schema> [rounds] [levers|hashing]
#
# levers (the default):
# today        ledger_claim_start + ledger_record_outcomes, the service's steps
# today+id     the same, the identity digest stored at submit (set before the round)
# narrow       the state in command_progress: proto4_claim_start + proto4_record_any
# narrow+one   and one entry for claim-and-start (proto4_claim_start_one)
# +noflight    and no in-flight rows
# +id          and the identity digest stored at submit
#
# hashing (seal.sql), each with the identity digest stored at submit, as the
# service stores it since 0050:
# service      ledger_claim_start + ledger_record_outcomes
# text3        the same steps, each hash over a fixed concatenation
# sealed       the same steps, entries unhashed, one seal a batch
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
url="$1"; rounds="${2:-12}"; set="${3:-levers}"
if [ "$(psql -X -At "$url" -c "select count(*) from commands where authority_id = 'proto'")" = 0 ]; then
    psql -q -X -v ON_ERROR_STOP=1 "$url" -v n="${N:-100000}" -f "$here/../engine-v3/setup.sql" >/dev/null
fi
psql -q -X -v ON_ERROR_STOP=1 "$url" -f "$here/proto.sql" >/dev/null
psql -q -X -v ON_ERROR_STOP=1 "$url" -c "set client_min_messages = warning" -f "$here/seal.sql" >/dev/null
psql -q -X "$url" -c "vacuum analyze" >/dev/null
# The identity digest of the next 256 queued commands (the warming batch
# and the measured one), as the insert would have stored it.
stored_identity="set local session_replication_role = replica;
update commands c set identity_digest = ledger_identity_digest(c.id, c.scope, c.idempotency_key, c.request_digest,
    c.digest_version, c.kind, c.authority_id, c.run_id, c.args, c.canonical, c.created_at, c.deadline_at,
    c.pinned_generation, c.intent_digest, c.canonical_rules, c.intent_epoch)
from (select q.id from command_queue q where q.authority_id = 'proto' order by q.rank, q.id limit 256) q
where c.authority_id = 'proto' and c.id = q.id;
set local session_replication_role = origin;"
round() { # prelude, claim call, record call
    psql -X -At -v ON_ERROR_STOP=1 "$url" <<SQL
begin isolation level serializable;
$1
select set_config('command_ledger.actor', 'custodian:proto', true) \g /dev/null
create temp table started (id uuid) on commit drop;
-- Warm: a batch through both steps first (a custodian's pooled
-- connections have planned them).
insert into started select * from $2;
select count(*) from $3 \g /dev/null
truncate started;
select pg_current_wal_insert_lsn() as wal0 \\gset
explain (analyze, format json) insert into started select * from $2;
explain (analyze, format json) select count(*) from $3;
select 'wal ' || (pg_current_wal_insert_lsn() - :'wal0'::pg_lsn);
rollback;
SQL
}
ms() {
    python3 -c '
import re, sys
text = sys.stdin.read()
t = [float(x) for x in re.findall(r"\"Execution Time\": ([0-9.]+)", text)]
w = re.findall(r"^wal ([0-9]+)", text, re.M)
print(" ".join(f"{x:.3f}" for x in t), f"total {sum(t):.3f} ms", f"{sum(t) * 1000 / 128:.1f} us/command",
      f"{int(w[0]) / 128:.0f} WAL bytes/command" if w else "")'
}
outcomes="(select jsonb_agg(jsonb_build_object('id', s.id, 'state', 'applied', 'result', jsonb_build_object('refund_id', 'rf_' || left(s.id::text, 8)))) from started s)"
today_claim="ledger_claim_start_ids(array['proto'], 'proto-holder', 128)"
today_record="ledger_record_outcomes('proto', 1, $outcomes)"
narrow_claim="proto4_claim_start(array['proto'], 'proto-holder', 128)"
one_claim="proto4_claim_start_one(array['proto'], 'proto-holder', 128, FLIGHT)"
narrow_record="proto4_record_any('proto', 1, $outcomes, FLIGHT)"
if [ "$set" = hashing ]; then
    for r in $(seq "$rounds"); do
        echo "round $r service $(round "$stored_identity" "$today_claim" "$today_record" | ms)"
        echo "round $r text3   $(round "$stored_identity" "proto5_claim_ids('text3', array['proto'], 'proto-holder', 128)" \
                                 "proto5_record_text3('proto', 1, $outcomes)" | ms)"
        echo "round $r sealed  $(round "$stored_identity" "proto5_claim_ids('sealed', array['proto'], 'proto-holder', 128)" \
                                 "proto5_record_sealed_then_seal('proto', 1, $outcomes)" | ms)"
    done
    exit 0
fi
for r in $(seq "$rounds"); do
    echo "round $r today              $(round '' "$today_claim" "$today_record" | ms)"
    echo "round $r today+id           $(round "$stored_identity" "$today_claim" "$today_record" | ms)"
    echo "round $r narrow             $(round '' "$narrow_claim" "${narrow_record/FLIGHT/true}" | ms)"
    echo "round $r narrow+one         $(round '' "${one_claim/FLIGHT/true}" "${narrow_record/FLIGHT/true}" | ms)"
    echo "round $r narrow+one+noflight $(round '' "${one_claim/FLIGHT/false}" "${narrow_record/FLIGHT/false}" | ms)"
    echo "round $r narrow+one+noflight+id $(round "$stored_identity" "${one_claim/FLIGHT/false}" "${narrow_record/FLIGHT/false}" | ms)"
done
