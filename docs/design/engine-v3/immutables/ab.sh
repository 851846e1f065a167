#!/usr/bin/env bash
# 0034 (the immutable columns' rules checked once, at insert) A/B on one
# PostgreSQL: A is a database migrated to 0034 and put back as 0033 left it
# (before_0034 below: the baseline's commands_guard and the CHECK constraints
# 0034 dropped, read from migrations/legacy/0032_baseline.sql), B the same database
# as 0034 leaves it; one binary for both.
#
#   ab.sh <url of a superuser's maintenance database, e.g. postgres://postgres@127.0.0.1:5499/postgres> [rounds]
#
# Needs target/release/command-ledger and target/release/ledger-bench
# (cargo build --release --bin command-ledger --bin ledger-bench), psql and python3.
# Prints, for A and B interleaved: the engine steps' database time (profile.sh
# v3: claim-start and record of 128 commands, EXPLAIN ANALYZE, rolled back, on
# 10^5 pending), an insert of 2,000 commands (insert.sql, rolled back), then
# W3b and W7 (ledger-bench --only w3b,w7) A B B A, each in a database made afresh.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../../.." && pwd)"
admin="$1"; rounds="${2:-6}"
base="${admin%/*}"
bin="$root/target/release"
before_0034() { # the SQL that puts a 0034 database back as 0033 left it
    python3 - "$root/migrations/legacy/0032_baseline.sql" "$root/migrations/legacy/0034_immutables_at_insert.sql" <<'PY'
import re, sys
baseline, m0034 = open(sys.argv[1]).read(), open(sys.argv[2]).read()
start = baseline.index("CREATE FUNCTION public.commands_guard()")
print(baseline[start:baseline.index("$$;", start) + 3].replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"))
dropped = re.findall(r"drop constraint (\w+)", m0034)
table = baseline[baseline.index("CREATE TABLE public.commands ("):]
checks = [l.strip().rstrip(",") for l in table[:table.index(")\nWITH")].splitlines()
          if l.strip().startswith("CONSTRAINT") and l.split()[1] in dropped]
assert len(checks) == len(dropped), (checks, dropped)
print("alter table commands\n" + ",\n".join("    add " + c for c in checks) + ";")
PY
}
fresh() { # name side
    psql -X -q "$admin" -c "drop database if exists $1" -c "create database $1" 2>/dev/null
    "$bin/command-ledger" migrate --database-url "$base/$1" >/dev/null 2>&1
    if [ "$2" = A ]; then before_0034 | psql -X -q -v ON_ERROR_STOP=1 "$base/$1" >/dev/null; fi
    echo "# $1 ($2): CHECK constraints on commands: $(psql -X -At "$base/$1" -c "select count(*) from pg_constraint where conrelid = 'commands'::regclass and contype = 'c'")"
}
insert_ms() {
    psql -X -At -v ON_ERROR_STOP=1 "$1" -f "$here/insert.sql" \
        | python3 -c 'import re,sys; print(re.findall(r"\"Execution Time\": ([0-9.]+)", sys.stdin.read())[0])'
}
fresh ab_profile_a A
fresh ab_profile_b B
for side in a b; do
    N=100000 bash "$here/../profile.sh" "$base/ab_profile_$side" v3 1 >/dev/null # loads setup.sql once
done
echo "## engine steps, ms per 128 commands: claim-start record total"
for r in $(seq "$rounds"); do
    for side in a b; do
        echo "$side $(bash "$here/../profile.sh" "$base/ab_profile_$side" v3 1)"
    done
done
echo "## insert of 2,000 commands, ms"
for r in $(seq "$rounds"); do
    for side in a b; do echo "$side $(insert_ms "$base/ab_profile_$side")"; done
done
echo "## W3b and W7, A B B A"
for run in a1 b1 b2 a2; do
    side=$(echo "${run:0:1}" | tr a-z A-Z)
    fresh "ab_bench_$run" "$side"
    BENCH_DATABASE_URL="$base/ab_bench_$run" "$bin/ledger-bench" --only w3b,w7 \
        --burn-down "${BURN_DOWN:-100000}" --out "$root/target/bench-ab-$run" >/dev/null 2>&1
    python3 - "$root/target/bench-ab-$run/results.json" "$run" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
def find(o):
    if isinstance(o, dict):
        for k, v in o.items():
            if k in ("w3b", "w7"):
                yield k, v
            else:
                yield from find(v)
for k, v in find(doc):
    figure = v.get("applied_per_s") or v.get("items_per_s")
    print(sys.argv[2], k, round(figure), json.dumps(v, sort_keys=True))
PY
done
