#!/usr/bin/env bash
# Local infrastructure of casestream without Docker: Kafka (KRaft), PostgreSQL, Apicurio Registry,
# SMTP sink. All state (data, logs, pid files, downloaded jars) lives in .local/ (git-ignored).
#
#   deploy/infra.sh up     [component...]   install what is missing, start, wait until ready (idempotent)
#   deploy/infra.sh down   [component...]   stop (data is kept; `make clean` removes it)
#   deploy/infra.sh status                  one line per component; exit 0 only if all are up
#   deploy/infra.sh env                     `export CASESTREAM_...=...` lines for the clients
#   deploy/infra.sh logs   [component] [-f] log file paths and their last lines (or follow)
#   deploy/infra.sh purge                   down, then delete all state (.local/: data, logs, jars)
#   deploy/infra.sh sweep-topics [PREFIX...]  delete the topics test and bench runs leave on the broker
#                                           (names starting with test. or bench., or the PREFIXes given)
#   deploy/infra.sh kafka-node start|stop|kill|pid N   one Kafka node of a cluster (stop: SIGTERM,
#                                           controlled shutdown; kill: SIGKILL; start waits until it answers)
#
# Components: postgres kafka registry smtp (registry needs postgres: its storage is there), and,
#   off by default, connect: Kafka Connect + the Debezium PostgreSQL connector (needs kafka and
#   postgres; `up connect`, or CASESTREAM_CONNECT=1 adds it to a plain `up`/`down`/`status`),
#   and pgbouncer: Debian's PgBouncer in transaction pooling mode in front of postgres
#   (`up pgbouncer`, or CASESTREAM_PGBOUNCER=1; lib/pgbouncer.sh).
# Ports (env): CASESTREAM_KAFKA_PORT=19092 CASESTREAM_KAFKA_CONTROLLER_PORT=19093
#   CASESTREAM_KAFKA_SSL_PORT=19094 CASESTREAM_KAFKA_SASL_PORT=19095 (secured listeners)
#   CASESTREAM_PG_PORT=15432 CASESTREAM_REGISTRY_PORT=18081 CASESTREAM_SMTP_PORT=12525
#   CASESTREAM_CONNECT_PORT=18083 (Kafka Connect REST API) CASESTREAM_PGBOUNCER_PORT=16432
# Kafka: CASESTREAM_KAFKA_BROKERS=1 (default) or 3 (KRaft cluster: replication factor 3,
#   min.insync.replicas=2; node n on node 1's ports + (n-1)*CASESTREAM_KAFKA_NODE_PORT_STEP, 10),
#   CASESTREAM_KAFKA_SECURE=1 (default; 0: PLAINTEXT only) adds SSL and SASL_SSL (SCRAM-SHA-512)
#   listeners with test certificates (deploy/kafka/tls.sh); `env` prints how to reach them.
# Other env: CASESTREAM_LOCAL_DIR (.local), CASESTREAM_PYTHON (.venv/bin/python),
#   CASESTREAM_READY_TIMEOUT (120 s per component), CASESTREAM_KAFKA_HEAP / _REGISTRY_HEAP (512m),
#   CASESTREAM_PG_BIN, CASESTREAM_PG_DIR, CASESTREAM_SMTP_MAILDIR, REGISTRY_VERSION (3.3.3),
#   CASESTREAM_KAFKA_QUICK_START (0; 1: JVM options for start-up over throughput, for throwaway
#   test clusters), CASESTREAM_REGISTRY_NAME (registry; another name: a second registry beside the
#   first, same install, own pid/log, give it other ports), CASESTREAM_REGISTRY_STORAGE
#   (postgresql; memory: H2, lost at stop), CASESTREAM_REGISTRY_JWT_PUBLIC_KEY_FILE /
#   CASESTREAM_REGISTRY_USERS_FILE (the registry demands bearer JWTs / HTTP basic; lib/registry.sh).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR
source "$HERE/lib/common.sh"
for _f in postgres kafka registry smtp connect pgbouncer; do
    # shellcheck disable=SC1090
    source "$HERE/lib/$_f.sh"
done

ALL=(postgres kafka registry smtp)
[[ "${CASESTREAM_CONNECT:-0}" == 1 ]] && ALL+=(connect)
[[ "${CASESTREAM_PGBOUNCER:-0}" == 1 ]] && ALL+=(pgbouncer)

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }

status_line() {  # status_line <component> <state> <pid> <detail>
    printf '%-9s %-9s %-8s %s\n' "$1" "$2" "$3" "$4"
    [[ "$2" == up ]] || STATUS_ALL_UP=0
}

pick() {  # pick <components...> -> $PICKED (validated, default all)
    PICKED=()
    local c
    for c in "$@"; do
        case "$c" in
            postgres|pg) PICKED+=(postgres) ;;
            kafka|registry|smtp|connect|pgbouncer) PICKED+=("$c") ;;
            *) die "unknown component '$c' (known: postgres kafka registry smtp connect pgbouncer)" ;;
        esac
    done
    ((${#PICKED[@]})) || PICKED=("${ALL[@]}")
}

has() { local x; for x in "${PICKED[@]}"; do [[ "$x" == "$1" ]] && return 0; done; return 1; }

with_lock() {  # serialize up/down of this .local (several shells, one working tree)
    mkdir -p "$CS_LOCAL"
    exec 9>"$CS_LOCAL/infra.lock"
    if ! flock -n 9; then
        log "waiting for another deploy/infra.sh up/down on $CS_LOCAL to finish"
        flock -w 600 9 || die "another deploy/infra.sh holds $CS_LOCAL/infra.lock for 10 min."
    fi
}

cmd_up() {
    pick "$@"
    has registry && ! has postgres && [[ "$CASESTREAM_REGISTRY_STORAGE" != memory ]] && PICKED=(postgres "${PICKED[@]}")
    has connect && ! has kafka && PICKED=(kafka "${PICKED[@]}")
    has connect && ! has postgres && PICKED=(postgres "${PICKED[@]}")
    has pgbouncer && ! has postgres && PICKED=(postgres "${PICKED[@]}")
    with_lock
    need_python
    local t0=$SECONDS
    # Start in dependency order, wait in parallel where possible.
    if has postgres; then pg_up; fi
    if has kafka; then kafka_up; fi
    if has smtp; then smtp_up; fi
    if has postgres; then pg_wait; fi
    if has registry; then registry_up; fi
    if has smtp; then smtp_wait; fi
    if has kafka; then kafka_wait; fi
    if has registry; then registry_wait; fi
    if has connect; then connect_up; connect_wait; fi
    if has pgbouncer; then pgbouncer_up; pgbouncer_wait; fi
    ok "up: ${PICKED[*]} ready in $((SECONDS - t0)) s (eval \"\$(deploy/infra.sh env)\" for the CASESTREAM_* variables)"
}

cmd_down() {
    pick "$@"
    with_lock
    # A plain `down` also stops a Connect worker that a test or `up connect` started.
    if has connect || [[ $# -eq 0 ]]; then connect_down; fi
    if has pgbouncer || [[ $# -eq 0 ]]; then pgbouncer_down; fi
    if has smtp; then smtp_down; fi
    if has registry; then registry_down; fi
    if has kafka; then kafka_down; fi
    if has postgres; then pg_down; fi
}

cmd_purge() {
    cmd_down
    # PG_DIR is the resolved data location (outside $CS_LOCAL when the fallback was used).
    rm -rf "$PG_DIR"
    rm -rf "$CS_LOCAL"
    ok "purge: removed $CS_LOCAL"
}

cmd_status() {
    STATUS_ALL_UP=1
    printf '%-9s %-9s %-8s %s\n' COMPONENT STATE PID ADDRESS
    pg_status; kafka_status; registry_status; smtp_status
    # connect is optional: reported, and counted only when CASESTREAM_CONNECT=1.
    STATUS_ALL_UP_BEFORE_CONNECT=$STATUS_ALL_UP
    connect_status
    [[ "${CASESTREAM_CONNECT:-0}" == 1 ]] || STATUS_ALL_UP=$STATUS_ALL_UP_BEFORE_CONNECT
    STATUS_ALL_UP_BEFORE_PGBOUNCER=$STATUS_ALL_UP
    pgbouncer_status
    [[ "${CASESTREAM_PGBOUNCER:-0}" == 1 ]] || STATUS_ALL_UP=$STATUS_ALL_UP_BEFORE_PGBOUNCER
    ((STATUS_ALL_UP)) || return 3
}

cmd_env() {
    cat <<EOF
export CASESTREAM_KAFKA_BOOTSTRAP=$KAFKA_BOOTSTRAP
export CASESTREAM_KAFKA_BROKERS=$KAFKA_NODES
EOF
    if [[ "$CASESTREAM_KAFKA_SECURE" == 1 ]]; then
        cat <<EOF
export CASESTREAM_KAFKA_SSL_BOOTSTRAP=$KAFKA_SSL_BOOTSTRAP
export CASESTREAM_KAFKA_SASL_BOOTSTRAP=$KAFKA_SASL_BOOTSTRAP
export CASESTREAM_KAFKA_TLS_CA=$KAFKA_TLS/ca.pem
export CASESTREAM_KAFKA_SCRAM_USER=$KAFKA_SCRAM_USER
export CASESTREAM_KAFKA_SCRAM_PASSWORD_FILE=$KAFKA_TLS/scram.password
EOF
    fi
    cat <<EOF
export CASESTREAM_REGISTRY_URL=$REG_URL
export CASESTREAM_PG_URL=$PG_URL
export CASESTREAM_SMTP_HOST=$CS_HOST
export CASESTREAM_SMTP_PORT=$CASESTREAM_SMTP_PORT
export CASESTREAM_SMTP_MAILDIR=$CASESTREAM_SMTP_MAILDIR
export CASESTREAM_CONNECT_URL=$CONNECT_URL
export CASESTREAM_PGBOUNCER_URL=$PGBOUNCER_URL
EOF
}

cmd_logs() {
    local follow=0 args=() a files=() c
    for a in "$@"; do if [[ "$a" == -f ]]; then follow=1; else args+=("$a"); fi; done
    pick "${args[@]+"${args[@]}"}"
    for c in "${PICKED[@]}"; do
        case "$c" in
            postgres) files+=("$(pg_logs)") ;;
            kafka) files+=("$(kafka_logs)") ;;
            registry) files+=("$(registry_logs)") ;;
            smtp) files+=("$(smtp_logs)") ;;
            connect) files+=("$(connect_logs)") ;;
            pgbouncer) files+=("$(pgbouncer_logs)") ;;
        esac
    done
    if ((follow)); then
        exec tail -n 20 -F "${files[@]}"
    fi
    for a in "${files[@]}"; do
        echo "==> $a <=="
        if [[ -f "$a" ]]; then tail -n 30 "$a"; else echo "(no log yet)"; fi
    done
}

cmd_sweep_topics() {
    need_python
    local args=() p
    for p in "$@"; do args+=(--prefix "$p"); done
    probe delete-topics --bootstrap "$KAFKA_BOOTSTRAP" "${args[@]+"${args[@]}"}"
}

cmd_kafka_node() {
    local action=${1:-} n=${2:-} pid
    [[ "$n" =~ ^[0-9]+$ ]] && ((n >= 1 && n <= KAFKA_NODES)) \
        || die "kafka-node: give a node number 1-$KAFKA_NODES (CASESTREAM_KAFKA_BROKERS=$KAFKA_NODES)."
    case "$action" in
        start)
            with_lock
            need_python
            kafka_up_node "$n"
            kafka_node "$n"
            wait_until "$CASESTREAM_READY_TIMEOUT" "kafka node $n" "$NODE_LOGS/server.log" "$NODE_PID" "$NODE_MARK" \
                probe kafka --bootstrap "$CS_HOST:$NODE_PORT" --timeout 2
            ok "kafka: node $n answers on $CS_HOST:$NODE_PORT" ;;
        stop) kafka_node "$n"; stop_pid "$NODE_PID" "$NODE_MARK" "kafka node $n" 60 ;;
        kill)
            kafka_node "$n"
            pid="$(pid_alive "$NODE_PID" "$NODE_MARK")" || die "kafka node $n is not running."
            kill -KILL "$pid"
            while [[ -d /proc/$pid ]]; do sleep 0.05; done
            ok "kafka: node $n (pid $pid) killed" ;;
        pid) kafka_node "$n"; pid_alive "$NODE_PID" "$NODE_MARK" || die "kafka node $n is not running." ;;
        *) die "kafka-node: start, stop, kill or pid (not '$action')." ;;
    esac
}

main() {
    cs_defaults
    pg_vars; kafka_vars; registry_vars; smtp_vars; connect_vars; pgbouncer_vars
    local cmd=${1:-}
    [[ $# -gt 0 ]] && shift
    case "$cmd" in
        up) cmd_up "$@" ;;
        down) cmd_down "$@" ;;
        status) cmd_status ;;
        env) cmd_env ;;
        logs) cmd_logs "$@" ;;
        purge) cmd_purge ;;
        sweep-topics) cmd_sweep_topics "$@" ;;
        kafka-node) cmd_kafka_node "$@" ;;
        -h|--help|help) usage ;;
        "") usage; exit 2 ;;
        *) usage >&2; die "unknown command '$cmd'" ;;
    esac
}

main "$@"
