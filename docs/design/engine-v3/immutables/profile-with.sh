#!/usr/bin/env bash
# profile-with.sh <url> <prelude.sql> [rounds]: profile.sh v3's two steps (128 commands, EXPLAIN ANALYZE,
# SERIALIZABLE, rolled back) after the prelude has run in the same transaction; prints claim-start,
# record and their total in ms per round. /dev/null as the prelude measures the database as it is.
here="$(cd "$(dirname "$0")" && pwd)"
PRELUDE="$(realpath "$2")" exec bash "$here/../profile.sh" "$1" v3 "${3:-6}"
