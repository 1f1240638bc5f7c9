# shellcheck shell=bash
# PgBouncer (Debian's package) in transaction pooling mode in front of the local PostgreSQL,
# off by default: `deploy/infra.sh up pgbouncer` (or CASESTREAM_PGBOUNCER=1 with a plain
# `up`/`down`/`status`). Every database of the server through one wildcard entry, trust auth
# as the server's loopback pg_hba, pool_mode=transaction: a server connection is another
# client's after each COMMIT, so session state (prepared statements, session advisory locks,
# LISTEN, SET) does not survive between transactions — what the tests behind it check.
#   config: deploy/pgbouncer/pgbouncer.ini.in -> $CS_LOCAL/pgbouncer/pgbouncer.ini on every `up`.
#   port:   CASESTREAM_PGBOUNCER_PORT (16432); `env` prints CASESTREAM_PGBOUNCER_URL.
# PgBouncer refuses to run as root: as root it runs as the `postgres` user.

pgbouncer_vars() {
    : "${CASESTREAM_PGBOUNCER_PORT:=16432}"
    PGB_DIR="$CS_LOCAL/pgbouncer"
    # A symlink (see pgbouncer_prepare_dir) is followed: the postgres user may not traverse its parents.
    [[ -L "$PGB_DIR" ]] && PGB_DIR="$(readlink -f "$PGB_DIR")"
    pgbouncer_paths
    PGBOUNCER_URL="postgresql://postgres@$CS_HOST:$CASESTREAM_PGBOUNCER_PORT"
}

pgbouncer_paths() {
    PGB_PID="$PGB_DIR/pgbouncer.pid"
    PGB_LOG="$PGB_DIR/pgbouncer.log"
    PGB_INI="$PGB_DIR/pgbouncer.ini"
    PGB_MARK="pgbouncer.ini"
}

# As root PgBouncer runs as `postgres`, which must reach its folder: when the checkout's parents
# are closed to other users (e.g. a `mktemp -d` clone), the folder lives under /var/tmp instead.
pgbouncer_prepare_dir() {
    mkdir -p "$PGB_DIR"
    [[ $(id -u) -eq 0 ]] || return 0
    if ! runuser -u postgres -- test -x "$PGB_DIR"; then
        local alt
        alt="/var/tmp/casestream-pgbouncer-$(echo -n "$PGB_DIR" | md5sum | cut -c1-10)"
        warn "pgbouncer: user 'postgres' cannot reach $PGB_DIR (parent permissions); using $alt"
        rm -rf "$PGB_DIR"
        mkdir -p "$alt"
        ln -sfn "$alt" "$PGB_DIR"
        PGB_DIR=$alt
        pgbouncer_paths
    fi
}

pgbouncer_bin() {
    local b
    for b in "$(command -v pgbouncer 2>/dev/null)" /usr/sbin/pgbouncer; do
        [[ -n "$b" && -x "$b" ]] && { echo "$b"; return 0; }
    done
    return 1
}

pgbouncer_install() {
    pgbouncer_bin >/dev/null && return 0
    log "pgbouncer: not found, installing Debian's pgbouncer"
    apt_install pgbouncer
    # The package starts its own instance (port 6432, /etc/pgbouncer); ours is separate.
    pgbouncer_bin >/dev/null || die "pgbouncer: installed, but no pgbouncer binary on PATH or in /usr/sbin."
}

pgbouncer_up() {
    already_running "$PGB_PID" "$PGB_MARK" pgbouncer: && return 0
    pgbouncer_install
    ensure_port_free "$CASESTREAM_PGBOUNCER_PORT" PgBouncer CASESTREAM_PGBOUNCER_PORT
    pgbouncer_prepare_dir
    sed -e "s|@HOST@|$CS_HOST|g" -e "s|@PG_PORT@|$CASESTREAM_PG_PORT|g" \
        -e "s|@PORT@|$CASESTREAM_PGBOUNCER_PORT|g" -e "s|@DIR@|$PGB_DIR|g" \
        "$CS_DEPLOY_DIR/pgbouncer/pgbouncer.ini.in" >"$PGB_INI"
    echo '"postgres" ""' >"$PGB_DIR/userlist.txt"
    : >"$PGB_LOG"
    [[ $(id -u) -eq 0 ]] && chown -R postgres "$PGB_DIR"
    log "pgbouncer: starting on $CS_HOST:$CASESTREAM_PGBOUNCER_PORT (pool_mode=transaction -> $CS_HOST:$CASESTREAM_PG_PORT)"
    local bin
    bin="$(pgbouncer_bin)"
    if [[ $(id -u) -eq 0 ]]; then
        start_daemon "$PGB_PID" "$PGB_LOG.out" "$PGB_DIR" runuser -u postgres -- "$bin" "$PGB_INI"
    else
        start_daemon "$PGB_PID" "$PGB_LOG.out" "$PGB_DIR" "$bin" "$PGB_INI"
    fi
}

pgbouncer_probe() {
    "$CASESTREAM_PYTHON" -c 'import sys, psycopg; psycopg.connect(sys.argv[1], connect_timeout=2).close()' \
        "$PGBOUNCER_URL/postgres"
}

pgbouncer_wait() {
    wait_until "$CASESTREAM_READY_TIMEOUT" pgbouncer "$PGB_LOG" "$PGB_PID" "$PGB_MARK" pgbouncer_probe
    ok "pgbouncer: ready on $CS_HOST:$CASESTREAM_PGBOUNCER_PORT (transaction pooling)"
}

pgbouncer_down() { stop_pid "$PGB_PID" "$PGB_MARK" pgbouncer 10; }

pgbouncer_status() {
    local pid address="$PGBOUNCER_URL (transaction pooling)"
    if pid="$(pid_alive "$PGB_PID" "$PGB_MARK")"; then
        if pgbouncer_probe 2>/dev/null; then
            status_line pgbouncer up "$pid" "$address"
        else
            status_line pgbouncer starting "$pid" "$address"
        fi
    elif port_open "$CASESTREAM_PGBOUNCER_PORT"; then
        status_line pgbouncer foreign - "$address (in use by $(port_owner "$CASESTREAM_PGBOUNCER_PORT"))"
    else
        status_line pgbouncer down - "$address (off by default: deploy/infra.sh up pgbouncer)"
    fi
}

pgbouncer_logs() { echo "$PGB_LOG"; }
