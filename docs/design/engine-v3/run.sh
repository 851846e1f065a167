#!/usr/bin/env bash
# Drains :n pending commands through a write path and prints the database
# time per command. Usage: run.sh <psql url of a migrated scratch database> <today|v3> [n] [batch]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
url="$1"; path="$2"; n="${3:-10000}"; batch="${4:-128}"
psql -q -X -v ON_ERROR_STOP=1 "$url" -v n="$n" -f "$here/setup.sql"
psql -q -X -v ON_ERROR_STOP=1 "$url" -f "$here/$path.sql"
psql -X -v ON_ERROR_STOP=1 "$url" -At <<SQL
set default_transaction_isolation = 'serializable';
select clock_timestamp() as t0 \gset
call proto_$path($batch);
select format('%s: %s commands in %s ms, %s us a command (claim + start + record, history included)',
              '$path', count(*), round(extract(epoch from clock_timestamp() - :'t0')::numeric * 1000),
              round(extract(epoch from clock_timestamp() - :'t0')::numeric * 1e6 / count(*), 1))
from commands where authority_id = 'proto' and state = 'applied'
  and finished_at >= :'t0'::timestamptz;
SQL
