#!/usr/bin/env bash
# Stop the test server .ci/postgres-setup.sh started (its cluster is kept: the next setup starts it again).
# Quiet and successful when there is nothing to stop.
set -euo pipefail

DIR=${COGNITIVE_LOOP_PG_DIR:-${TMPDIR:-/tmp}/cognitive-loop-pg}
OWNER=${COGNITIVE_LOOP_PG_OWNER:-pgtest}
DATA="$DIR/data"

initdb=$(compgen -G "/usr/lib/postgresql/*/bin/initdb" | sort -V | tail -n 1 || true)
[ -n "$initdb" ] && [ -s "$DATA/PG_VERSION" ] || exit 0
pg_ctl="$(dirname "$initdb")/pg_ctl"
if [ "$(id -u)" -eq 0 ]; then
    as_owner() { runuser -u "$OWNER" -- "$@"; }
else
    as_owner() { "$@"; }
fi
if as_owner "$pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
    as_owner "$pg_ctl" -D "$DATA" -m fast -w -t 60 stop >/dev/null
    echo "postgres-stop: stopped the server of $DATA" >&2
fi
