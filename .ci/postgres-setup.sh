#!/usr/bin/env bash
# A throwaway PostgreSQL server for the tests of session's PostgresStore: installs Debian's PostgreSQL when it is
# missing, makes a cluster (once) owned by an unprivileged user (the server refuses to run as root), starts it on
# 127.0.0.1 only, makes the database, and prints the URL the tests read from COGNITIVE_LOOP_TEST_POSTGRES, alone on
# standard output (everything else goes to standard error):
#
#     COGNITIVE_LOOP_TEST_POSTGRES=$(bash .ci/postgres-setup.sh)
#
# Idempotent: a second run finds the server answering and only prints the URL. .ci/postgres-stop.sh stops it.
# The cluster is for tests only: fsync is off (a test never survives a crash of the server, only of its own
# process), and every role is trusted on 127.0.0.1 except cl_password, which must give its password (the tests
# set it), so that password handling is tested against a server that checks it.
set -euo pipefail

PORT=${COGNITIVE_LOOP_PG_PORT:-54329}
DIR=${COGNITIVE_LOOP_PG_DIR:-${TMPDIR:-/tmp}/cognitive-loop-pg}
OWNER=${COGNITIVE_LOOP_PG_OWNER:-pgtest}
DB=cl
ROLE=cl
DATA="$DIR/data"

log() { echo "postgres-setup: $*" >&2; }

# The newest installed PostgreSQL's programs.
bin_dir() {
    local initdb
    initdb=$(compgen -G "/usr/lib/postgresql/*/bin/initdb" | sort -V | tail -n 1 || true)
    [ -n "$initdb" ] && dirname "$initdb"
}

BIN=$(bin_dir || true)
if [ -z "$BIN" ]; then
    log "installing PostgreSQL (Debian's postgresql package)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    BIN=$(bin_dir)
fi

if [ "$(id -u)" -eq 0 ]; then
    id -u "$OWNER" >/dev/null 2>&1 || useradd --system --create-home --shell /usr/sbin/nologin "$OWNER"
    as_owner() { runuser -u "$OWNER" -- "$@"; }
    mkdir -p "$DIR"
    chown "$OWNER" "$DIR"
else
    as_owner() { "$@"; }
    mkdir -p "$DIR"
fi
chmod 700 "$DIR"

if [ ! -s "$DATA/PG_VERSION" ]; then
    log "making a cluster in $DATA"
    as_owner "$BIN/initdb" -D "$DATA" -U "$ROLE" -A trust -E UTF8 --no-sync >/dev/null
    as_owner tee "$DATA/pg_hba.conf" >/dev/null <<'EOF'
# Written by .ci/postgres-setup.sh: loopback only; the first matching line wins.
local  all  all                        trust
host   all  cl_password  127.0.0.1/32  scram-sha-256
host   all  all          127.0.0.1/32  trust
EOF
fi

ready() { "$BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT" -d postgres; }

if ! ready; then
    # A server of this cluster that does not answer (half started, or a stale pid file) is stopped first.
    as_owner "$BIN/pg_ctl" -D "$DATA" -m immediate stop >/dev/null 2>&1 || true
    log "starting the server on 127.0.0.1:$PORT (log: $DIR/server.log)"
    if ! as_owner "$BIN/pg_ctl" -D "$DATA" -l "$DIR/server.log" -w -t 60 \
            -o "-h 127.0.0.1 -p $PORT -k $DIR -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
            start >/dev/null; then
        log "the server did not start; the end of its log:"
        tail -n 30 "$DIR/server.log" >&2 || true
        exit 1
    fi
fi

psql_() { as_owner "$BIN/psql" -X -q -h 127.0.0.1 -p "$PORT" -U "$ROLE" "$@"; }
if [ "$(psql_ -d postgres -tAc "SELECT count(*) FROM pg_database WHERE datname = '$DB'")" != 1 ]; then
    log "making the database $DB"
    psql_ -d postgres -c "CREATE DATABASE $DB"
fi
echo "postgresql://$ROLE@127.0.0.1:$PORT/$DB"
