#!/usr/bin/env bash
# The submit side as an engine step (proto.sql) against today's insert path,
# on one PostgreSQL: a scratch database migrated by the release binary,
# 10^5 pending commands loaded (../setup.sql, as profile.sh loads it), then
# proto.sql applied. Each round, A then B, in a transaction rolled back:
#   A  today:  insert into commands ... select from generate_series(1, N)
#              (the guard, the insert's statement trigger, the counting trigger)
#   B  engine: select proto_submit(N)  (the same rows, no trigger)
# and prints EXPLAIN ANALYZE's execution time of each (timing off), in ms.
# Each round is a session of its own that runs its statement once, rolled
# back, before the one it times. Then once, committed and checked: what B wrote (entries, queue rows, digests).
#
#   ab.sh <url of a superuser's maintenance database, e.g. postgres://postgres@127.0.0.1:5499/postgres> [rounds] [N]
#
# Needs target/release/command-ledger (cargo build --release), psql, python3.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../../.." && pwd)"
admin="$1"; rounds="${2:-8}"; n="${3:-2000}"
base="${admin%/*}"
db=proto_submit_ab
psql -X -q "$admin" -c "drop database if exists $db" -c "create database $db" 2>/dev/null
"$root/target/release/command-ledger" migrate --database-url "$base/$db" >/dev/null 2>&1
url="$base/$db"
echo "# $db: migration $(psql -X -At "$url" -c "select max(version) from _sqlx_migrations")"
psql -q -X -v ON_ERROR_STOP=1 "$url" -v n="${PENDING:-100000}" -f "$here/../setup.sql" >/dev/null
psql -q -X -v ON_ERROR_STOP=1 "$url" -f "$here/proto.sql" >/dev/null
psql -q -X "$url" -c "vacuum analyze" >/dev/null
ms() { python3 -c 'import re,sys; print(re.findall(r"\"Execution Time\": ([0-9.]+)", sys.stdin.read())[0])'; }
# Today's insert of :n commands, shaped as ../setup.sql's (and as
# ../immutables/insert.sql times it); A warms the session with it, then times it.
today_insert=$(cat <<'SQL'
insert into commands (id, scope, idempotency_key, request_digest, digest_version, kind, authority_id,
                      args, canonical, intent_digest, canonical_rules)
select gen_random_uuid(), '00000000-0000-0000-0000-000000000001', 'x-' || g || random()::text,
       sha256(('r' || g)::bytea), 3, 'refund', 'proto',
       jsonb_build_object('to', 'ada' || g || '@example.com', 'amount', '12.00 USD'),
       jsonb_build_object('kind', 'refund', 'authority', 'proto',
                          'args', jsonb_build_object('to', 'ada' || g || '@example.com',
                                                     'amount', jsonb_build_object('amount_minor', 1200, 'currency', 'USD'))),
       sha256(('i' || g)::bytea), '{money@/amount}'
from generate_series(1, :n) g
SQL
)
a() {
    psql -X -At -v ON_ERROR_STOP=1 -v n="$n" "$url" <<SQL | ms
-- Warm: the same insert once first, rolled back, so that the session has
-- planned it and loaded its triggers (as the API's pooled connections have).
begin;
select set_config('command_ledger.actor', 'proto:submit', true) \g /dev/null
$today_insert;
rollback;
begin;
select set_config('command_ledger.actor', 'proto:submit', true) \g /dev/null
explain (analyze, timing off, summary on, format json)
$today_insert;
rollback;
SQL
}
b() {
    psql -X -At -v ON_ERROR_STOP=1 -v n="$n" "$url" <<'SQL' | ms
-- Warm, as for A.
begin;
select proto_submit(:n) \g /dev/null
rollback;
begin;
select set_config('command_ledger.actor', 'proto:submit', true) \g /dev/null
explain (analyze, timing off, summary on, format json) select proto_submit(:n);
rollback;
SQL
}
echo "## ms per $n commands inserted, A (today) and B (engine step), interleaved"
for r in $(seq "$rounds"); do
    echo "a $(a)"
    echo "b $(b)"
done
echo "## what B writes (committed once, 10 commands)"
psql -X -v ON_ERROR_STOP=1 "$url" <<'SQL'
select set_config('command_ledger.actor', 'proto:submit', false) \g /dev/null
select proto_submit(10) as inserted;
select count(*) filter (where c.identity_digest is not null) as with_identity,
       count(*) filter (where c.identity_digest = ledger_identity_digest(c.id, c.scope, c.idempotency_key,
           c.request_digest, c.digest_version, c.kind, c.authority_id, c.run_id, c.args, c.canonical,
           c.created_at, c.deadline_at, c.pinned_generation, c.intent_digest, c.canonical_rules,
           c.intent_epoch)) as identity_recomputes,
       count(h.*) as pending_entries,
       count(*) filter (where h.row_digest = ledger_row_digest_v2(c.identity_digest, 'pending', null, null, null, null)
                          and h.hash = ledger_entry_hash(null, c.id, null, 'pending', h.at, h.actor, null, h.reason,
                                                         h.row_digest)) as entries_recompute,
       count(q.*) as queued,
       count(*) filter (where c.updated_at = c.created_at) as updated_at_is_created_at
from commands c
left join command_history h on h.command_id = c.id
left join command_queue q on q.id = c.id
where c.idempotency_key like 'x-%' and c.authority_id = 'proto';
SQL
psql -X -q "$admin" -c "drop database if exists $db" 2>/dev/null
