# shellcheck shell=bash
# PostgreSQL (Debian's packages) with its own data directory, on 127.0.0.1 only.
#   binaries: $CASESTREAM_PG_BIN, else /usr/lib/postgresql/15/bin, else the newest
#             /usr/lib/postgresql/*/bin, else `apt-get install postgresql-15` (no main cluster).
#   data:     $CASESTREAM_PG_DIR (default .local/pg): data/ + postgres.log. initdb refuses root,
#             so as root the server runs as the `postgres` user (the directory is chowned to it).
#   config:   deploy/postgres/casestream.conf (wal_level=logical, max_connections=300, ...) and
#             deploy/postgres/pg_hba.conf (trust on loopback), copied in on every `up`.
#   ready:    pg_isready, then deploy/postgres/init-databases.sql creates the databases (idempotent).

pg_vars() {
    : "${CASESTREAM_PG_DIR:=$CS_LOCAL/pg}"
    PG_DIR="$CASESTREAM_PG_DIR"
    # A symlink (see pg_prepare_dir) is followed: the postgres user may not traverse its parents.
    [[ -L "$PG_DIR" ]] && PG_DIR="$(readlink -f "$PG_DIR")"
    pg_paths
    PG_URL="postgresql://postgres@$CS_HOST:$CASESTREAM_PG_PORT"
}

pg_paths() {
    PG_DATA="$PG_DIR/data"
    PG_LOG="$PG_DIR/postgres.log"
}

pg_find_bin() {
    [[ -n "${PG_BIN:-}" ]] && return 0
    local cand
    for cand in "${CASESTREAM_PG_BIN:-}" /usr/lib/postgresql/15/bin; do
        if [[ -n "$cand" && -x "$cand/postgres" && -x "$cand/initdb" ]]; then PG_BIN=$cand; return 0; fi
    done
    cand="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)"
    if [[ -n "$cand" && -x "$cand/postgres" ]]; then PG_BIN=$cand; return 0; fi
    return 1
}

pg_install() {
    pg_find_bin && return 0
    log "postgres: no server binaries found, installing them from Debian's packages"
    # Only the binaries: no 'main' cluster started on port 5432 by the package scripts.
    if [[ ! -f /etc/postgresql-common/createcluster.conf ]] && [[ $(id -u) -eq 0 ]]; then
        mkdir -p /etc/postgresql-common
        echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.conf
    fi
    if apt_has postgresql-15; then apt_install postgresql-15; else apt_install postgresql; fi
    pg_find_bin || die "postgres: installed, but no server binaries under /usr/lib/postgresql/*/bin (set CASESTREAM_PG_BIN)."
}

# as_pg <cmd...>: as root run as the postgres user (initdb/postgres refuse root), else as we are.
as_pg() {
    if [[ $(id -u) -eq 0 ]]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

pg_prepare_dir() {
    if [[ $(id -u) -eq 0 ]]; then
        id postgres >/dev/null 2>&1 \
            || useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres \
            || die "postgres: no 'postgres' user and could not create one."
        mkdir -p "$PG_DIR"
        if ! runuser -u postgres -- test -x "$PG_DIR"; then
            # The checkout's parents are closed to other users: keep the data outside it.
            local alt
            alt="/var/tmp/casestream-pg-$(echo -n "$PG_DIR" | md5sum | cut -c1-10)"
            warn "postgres: user 'postgres' cannot reach $PG_DIR (parent permissions); using $alt"
            rmdir "$PG_DIR" 2>/dev/null || true
            mkdir -p "$alt"
            ln -sfn "$alt" "$PG_DIR"
            PG_DIR=$alt
            pg_paths
        fi
        [[ "$(stat -c %U "$PG_DIR")" == postgres ]] || chown -R postgres: "$PG_DIR"
        chmod 700 "$PG_DIR"
    else
        mkdir -p "$PG_DIR"
    fi
}

pg_running() { [[ -f "$PG_DATA/postmaster.pid" ]] && as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" status >/dev/null 2>&1; }
pg_pid()     { head -1 "$PG_DATA/postmaster.pid" 2>/dev/null || echo -; }
pg_ready()   { "$PG_BIN/pg_isready" -q -h "$CS_HOST" -p "$CASESTREAM_PG_PORT" -t 2; }
pg_psql()    { "$PG_BIN/psql" -X -q -h "$CS_HOST" -p "$CASESTREAM_PG_PORT" -U postgres -v ON_ERROR_STOP=1 "$@"; }

pg_up() {
    pg_install
    pg_prepare_dir
    if pg_running; then
        log "postgres: already running (pid $(pg_pid))"
        return 0
    fi
    ensure_port_free "$CASESTREAM_PG_PORT" "PostgreSQL" CASESTREAM_PG_PORT
    local major
    major="$("$PG_BIN/postgres" --version | grep -oE '[0-9]+' | head -1)"
    if [[ -f "$PG_DATA/PG_VERSION" ]]; then
        [[ "$(<"$PG_DATA/PG_VERSION")" == "$major" ]] \
            || die "postgres: $PG_DATA was made by PostgreSQL $(<"$PG_DATA/PG_VERSION") but the server is $major ($PG_BIN). Remove $PG_DIR (make clean) or set CASESTREAM_PG_BIN."
    else
        log "postgres: initdb $PG_DATA (PostgreSQL $major)"
        as_pg "$PG_BIN/initdb" -D "$PG_DATA" -U postgres --auth=trust --encoding=UTF8 --no-locale \
            >"$PG_DIR/initdb.log" 2>&1 || { show_tail "$PG_DIR/initdb.log"; die "postgres: initdb failed."; }
        echo "include_if_exists = 'casestream.conf'" | as_pg tee -a "$PG_DATA/postgresql.conf" >/dev/null
    fi
    # Read by this shell, written by the server's user: a checkout in a private directory
    # (mktemp -d) is unreadable to that user.
    as_pg tee "$PG_DATA/casestream.conf" <"$CS_DEPLOY_DIR/postgres/casestream.conf" >/dev/null
    as_pg tee "$PG_DATA/pg_hba.conf" <"$CS_DEPLOY_DIR/postgres/pg_hba.conf" >/dev/null
    log "postgres: starting on $CS_HOST:$CASESTREAM_PG_PORT"
    as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$PG_LOG" -s \
        -o "-p $CASESTREAM_PG_PORT -c listen_addresses=$CS_HOST" start >/dev/null 2>&1 9>&- \
        || { show_tail "$PG_LOG"; die "postgres: pg_ctl start failed (log: $PG_LOG)."; }
}

pg_wait() {
    local deadline=$((SECONDS + CASESTREAM_READY_TIMEOUT))
    until pg_ready; do
        if ((SECONDS >= deadline)); then show_tail "$PG_LOG"; die "postgres: not ready after ${CASESTREAM_READY_TIMEOUT}s (log: $PG_LOG)."; fi
        if ! pg_running; then show_tail "$PG_LOG"; die "postgres: exited during start-up (log: $PG_LOG)."; fi
        sleep 0.2
    done
    pg_psql -d postgres -f "$CS_DEPLOY_DIR/postgres/init-databases.sql" \
        || die "postgres: creating the databases failed."
    ok "postgres: ready on $PG_URL"
}

pg_down() {
    pg_find_bin || { log "postgres: not installed"; return 0; }
    if ! pg_running; then log "postgres: not running"; return 0; fi
    as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -m fast -w -t 60 -s stop || die "postgres: pg_ctl stop failed (log: $PG_LOG)."
    ok "postgres: stopped"
}

pg_status() {
    if ! pg_find_bin; then status_line postgres missing - "no server binaries"; return; fi
    if pg_running; then
        if pg_ready; then status_line postgres up "$(pg_pid)" "$PG_URL"; else status_line postgres starting "$(pg_pid)" "$PG_URL"; fi
    elif port_open "$CASESTREAM_PG_PORT"; then
        status_line postgres foreign - "$PG_URL (in use by $(port_owner "$CASESTREAM_PG_PORT"))"
    else
        status_line postgres down - "$PG_URL"
    fi
}

pg_logs() { echo "$PG_LOG"; }
