#!/usr/bin/env bash
# The database time of one command's claim, start and record, by EXPLAIN
# ANALYZE of 128-row steps (best and median of N rounds, each in a
# SERIALIZABLE transaction rolled back), on a scratch database holding
# :n pending commands of one leased authority (setup.sql).
#
#   profile.sh <url of a database migrated to 0029> today [rounds]
#   profile.sh <url of a database migrated to 0030> v3 [rounds]
#   PRELUDE=file.sql profile.sh <url> v3 [rounds]   (v3 after file.sql, in the same transaction)
#
# today: the service's statements before 0030 (claim, start, record: three
# updates of commands, each firing the guard and the history trigger);
# v3: ledger_claim_start and ledger_record_outcomes (0030).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
url="$1"; path="$2"; rounds="${3:-12}"
# Loaded once per database (every round rolls back).
if [ "$(psql -X -At "$url" -c "select count(*) from commands where authority_id = 'proto'")" = 0 ]; then
    psql -q -X -v ON_ERROR_STOP=1 "$url" -v n="${N:-100000}" -f "$here/setup.sql" >/dev/null
    psql -q -X "$url" -c "vacuum analyze" >/dev/null
fi
ms() { python3 -c 'import json,sys; print(round(json.load(sys.stdin)[0]["Execution Time"], 3))'; }
for round in $(seq "$rounds"); do
    if [ "$path" = v3 ]; then
        out=$(psql -X -At -v ON_ERROR_STOP=1 -v prelude="${PRELUDE:-/dev/null}" "$url" <<'SQL'
begin isolation level serializable;
-- PRELUDE (a file): run first in the same transaction, rolled back with it.
\i :prelude
select set_config('command_ledger.actor', 'custodian:proto', true) \g /dev/null
-- Warm: a batch through both steps first, so that the session has planned
-- them (as a custodian's pooled connections have).
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
)
    else
        out=$(psql -X -At -v ON_ERROR_STOP=1 "$url" <<'SQL'
begin isolation level serializable;
select set_config('command_ledger.actor', 'custodian:proto', true) \g /dev/null
-- Warm: a batch through the three transitions first, so that the session
-- has planned the triggers' statements (as a custodian's pooled connections have).
create temp table warm on commit drop as
select q.id from command_queue q where q.authority_id = 'proto' order by q.rank, q.id limit 128;
update commands c set state = 'prepared', authority_generation = 1 from warm w where c.authority_id = 'proto' and c.id = w.id;
update commands c set state = 'effect_started' from warm w where c.authority_id = 'proto' and c.id = w.id;
update commands c set state = 'applied' from warm w where c.authority_id = 'proto' and c.id = w.id;
create temp table picked on commit drop as
select q.id from command_queue q where q.authority_id = 'proto' order by q.rank, q.id limit 128;
explain (analyze, format json)
update commands c set state = 'prepared', authority_generation = 1
from authorities a, picked p
where c.authority_id = 'proto' and c.id = p.id and c.state = 'pending'
  and a.id = 'proto' and a.lease_holder = 'proto-holder' and a.lease_expires_at > now();
explain (analyze, format json)
update commands c set state = 'effect_started'
from authorities a, picked p
where c.authority_id = 'proto' and c.id = p.id and c.state = 'prepared' and c.authority_generation = 1
  and a.id = 'proto' and a.generation = 1 and a.lease_holder = 'proto-holder' and a.lease_expires_at > now();
explain (analyze, format json)
update commands c set state = 'applied', result = jsonb_build_object('refund_id', 'rf_' || left(c.id::text, 8))
from authorities a, picked p
where c.authority_id = 'proto' and c.id = p.id and c.state = 'effect_started' and c.authority_generation = 1
  and a.id = 'proto' and a.generation = 1;
rollback;
SQL
)
    fi
    # One JSON plan per line group: sum the Execution Times of the round.
    python3 - "$out" <<'PY'
import json, re, sys
text = sys.argv[1]
times = [float(t) for t in re.findall(r'"Execution Time": ([0-9.]+)', text)]
print(" ".join(f"{t:.3f}" for t in times), f"total {sum(times):.3f}")
PY
done
