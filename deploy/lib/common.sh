# shellcheck shell=bash
# shellcheck disable=SC2034  # CS_* variables are used by the files sourced after this one
# Common helpers for the local infrastructure launchers (sourced by deploy/infra.sh).
#
# Layout: every component keeps its state under $CS_LOCAL/<component>/ (git-ignored):
#   <component>.pid   pid of the process we started (validated against /proc/<pid>/cmdline)
#   *.log             the component's own log files
# Ports and paths are overridable by environment variables (see cs_defaults).
# Every failure goes through `die` with a one-line cause and a hint; no stack traces.

set -o pipefail

CS_DEPLOY_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CS_REPO="$(cd "$CS_DEPLOY_DIR/.." && pwd)"

cs_defaults() {
    : "${CASESTREAM_LOCAL_DIR:=$CS_REPO/.local}"
    : "${CASESTREAM_KAFKA_PORT:=19092}"
    : "${CASESTREAM_KAFKA_CONTROLLER_PORT:=19093}"
    : "${CASESTREAM_PG_PORT:=15432}"
    : "${CASESTREAM_REGISTRY_PORT:=18081}"
    : "${CASESTREAM_REGISTRY_MGMT_PORT:=18082}"
    : "${CASESTREAM_SMTP_PORT:=12525}"
    : "${CASESTREAM_CONNECT_PORT:=18083}"
    : "${CASESTREAM_CONNECT_HEAP:=512m}"
    : "${CASESTREAM_KAFKA_SSL_PORT:=$((CASESTREAM_KAFKA_PORT + 2))}"
    : "${CASESTREAM_KAFKA_SASL_PORT:=$((CASESTREAM_KAFKA_PORT + 3))}"
    : "${CASESTREAM_KAFKA_BROKERS:=1}"
    : "${CASESTREAM_KAFKA_NODE_PORT_STEP:=10}"
    : "${CASESTREAM_KAFKA_SECURE:=1}"
    : "${CASESTREAM_KAFKA_HEAP:=512m}"
    : "${CASESTREAM_KAFKA_QUICK_START:=0}"
    : "${CASESTREAM_REGISTRY_HEAP:=512m}"
    : "${CASESTREAM_REGISTRY_STORAGE:=postgresql}"
    : "${CASESTREAM_READY_TIMEOUT:=120}"
    : "${CASESTREAM_PYTHON:=$CS_REPO/.venv/bin/python}"
    CS_LOCAL="$CASESTREAM_LOCAL_DIR"
    CS_HOST=127.0.0.1
    local var
    for var in CASESTREAM_KAFKA_PORT CASESTREAM_KAFKA_CONTROLLER_PORT CASESTREAM_KAFKA_SSL_PORT \
               CASESTREAM_KAFKA_SASL_PORT CASESTREAM_PG_PORT \
               CASESTREAM_REGISTRY_PORT CASESTREAM_REGISTRY_MGMT_PORT CASESTREAM_SMTP_PORT \
               CASESTREAM_CONNECT_PORT; do
        [[ "${!var}" =~ ^[0-9]+$ ]] && (( ${!var} >= 1 && ${!var} <= 65535 )) \
            || die "$var='${!var}' is not a port number (1-65535)."
    done
    [[ "$CASESTREAM_KAFKA_BROKERS" == 1 || "$CASESTREAM_KAFKA_BROKERS" == 3 ]] \
        || die "CASESTREAM_KAFKA_BROKERS='$CASESTREAM_KAFKA_BROKERS': 1 (default) or 3."
    [[ "$CASESTREAM_KAFKA_SECURE" == 0 || "$CASESTREAM_KAFKA_SECURE" == 1 ]] \
        || die "CASESTREAM_KAFKA_SECURE='$CASESTREAM_KAFKA_SECURE': 1 (default: SSL and SASL_SSL listeners too) or 0."
    [[ "$CASESTREAM_REGISTRY_STORAGE" == postgresql || "$CASESTREAM_REGISTRY_STORAGE" == memory ]] \
        || die "CASESTREAM_REGISTRY_STORAGE='$CASESTREAM_REGISTRY_STORAGE': postgresql (default: database 'registry') or memory (H2, lost at stop)."
    [[ "$CASESTREAM_KAFKA_QUICK_START" == 0 || "$CASESTREAM_KAFKA_QUICK_START" == 1 ]] \
        || die "CASESTREAM_KAFKA_QUICK_START='$CASESTREAM_KAFKA_QUICK_START': 0 (default: G1 and C2, for throughput) or 1 (start-up first, for throwaway test clusters)."
    [[ "$CASESTREAM_KAFKA_NODE_PORT_STEP" =~ ^[0-9]+$ ]] && ((CASESTREAM_KAFKA_NODE_PORT_STEP >= 4)) \
        || die "CASESTREAM_KAFKA_NODE_PORT_STEP='$CASESTREAM_KAFKA_NODE_PORT_STEP': a number >= 4 (each node uses 4 ports)."
}

# ---------------------------------------------------------------- output
if [[ -t 2 ]]; then
    _c_red=$'\e[31m'; _c_grn=$'\e[32m'; _c_yel=$'\e[33m'; _c_dim=$'\e[2m'; _c_off=$'\e[0m'
else
    _c_red=; _c_grn=; _c_yel=; _c_dim=; _c_off=
fi
log()  { printf '%sinfra:%s %s\n' "$_c_dim" "$_c_off" "$*" >&2; }
ok()   { printf '%sinfra:%s %s%s%s\n' "$_c_dim" "$_c_off" "$_c_grn" "$*" "$_c_off" >&2; }
warn() { printf '%sinfra: warning:%s %s\n' "$_c_yel" "$_c_off" "$*" >&2; }
die()  { printf '%sinfra: error:%s %s\n' "$_c_red" "$_c_off" "$*" >&2; exit 1; }

# ---------------------------------------------------------------- prerequisites
need_cmd() {  # need_cmd <cmd> <hint>
    command -v "$1" >/dev/null 2>&1 || die "'$1' not found on PATH. $2"
}

java_major() {  # java_major <java binary> -> major version (17, 21, 25...) or nothing
    "$1" -XshowSettings:properties -version 2>&1 \
        | awk -F'= ' '/java.specification.version/ {split($2, v, "."); print (v[1] == "1" ? v[2] : v[1])}'
}

# find_java <min major> <override var name>: prints a java binary of at least that version.
# Order: $<override var>/bin/java, $JAVA_HOME/bin/java, java on PATH, then /usr/lib/jvm/*/bin/java
# (newest first, e.g. the Temurin JDK beside Debian's OpenJDK 17).
find_java() {
    local min=$1 override=${!2:-} cand v best="" bestv=0
    local cands=()
    [[ -n "$override" ]] && cands+=("$override/bin/java")
    [[ -n "${JAVA_HOME:-}" ]] && cands+=("$JAVA_HOME/bin/java")
    command -v java >/dev/null 2>&1 && cands+=("$(command -v java)")
    for cand in "${cands[@]}"; do
        [[ -x "$cand" ]] || continue
        v="$(java_major "$cand")"
        if [[ -n "$v" ]] && ((v >= min)); then echo "$cand"; return 0; fi
    done
    for cand in /usr/lib/jvm/*/bin/java; do
        [[ -x "$cand" ]] || continue
        v="$(java_major "$cand")"
        if [[ -n "$v" ]] && ((v >= min && v > bestv)); then best=$cand; bestv=$v; fi
    done
    [[ -n "$best" ]] && echo "$best"
}

# need_java <min major> <override var> <what>: sets JAVA_BIN or dies with a hint.
need_java() {
    local min=$1 var=$2 what=$3
    JAVA_BIN="$(find_java "$min" "$var")" && [[ -n "$JAVA_BIN" ]] && return 0
    if ((min <= 17)) && can_apt; then
        log "no Java $min+ found: installing Debian's openjdk-17-jre-headless"
        apt_install openjdk-17-jre-headless
        JAVA_BIN="$(find_java "$min" "$var")" && [[ -n "$JAVA_BIN" ]] && return 0
    fi
    if ! command -v java >/dev/null 2>&1 && ! ls /usr/lib/jvm/*/bin/java >/dev/null 2>&1; then
        die "no Java found: $what needs Java $min+. Install a JDK (Debian: apt-get install -y openjdk-17-jre-headless for Kafka; Java 21+ for the registry), or set $var=<jdk home>."
    fi
    die "$what needs Java $min+, found only older Java (java on PATH: $(java_major "$(command -v java 2>/dev/null || echo java)" 2>/dev/null || echo none); /usr/lib/jvm: $(ls /usr/lib/jvm 2>/dev/null | tr '\n' ' ')). Install a JDK $min+ (e.g. Temurin) and set $var=<jdk home>."
}

can_apt() { [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; }

need_mvn() {
    command -v mvn >/dev/null 2>&1 && return 0
    if can_apt; then
        log "mvn not found: installing Debian's maven"
        apt_install maven
        command -v mvn >/dev/null 2>&1 && return 0
    fi
    die "'mvn' not found on PATH. Install Maven (Debian: apt-get install -y maven); it fetches the Kafka jars and the registry from Maven Central."
}

need_python() {
    [[ -x "$CASESTREAM_PYTHON" ]] \
        || die "no Python virtual environment at $CASESTREAM_PYTHON. Run 'make venv' first (or set CASESTREAM_PYTHON)."
    "$CASESTREAM_PYTHON" -c 'import confluent_kafka, aiosmtpd' 2>/dev/null \
        || die "$CASESTREAM_PYTHON lacks confluent_kafka/aiosmtpd. Run 'make venv' to install the pinned packages."
}

# apt_install <pkg...>: Debian packages, non-interactive, one 'apt-get update' per run.
_CS_APT_UPDATED=
apt_update_once() {
    command -v apt-get >/dev/null 2>&1 || die "apt-get not available: install the missing package with your system's package manager."
    [[ $(id -u) -eq 0 ]] || die "installing packages needs root: run this once as root (or install them yourself)."
    [[ -n "$_CS_APT_UPDATED" ]] && return 0
    log "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null || die "apt-get update failed."
    _CS_APT_UPDATED=1
}
apt_has() { apt_update_once; [[ -n "$(apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ && $2 != "(none)" {print $2}')" ]]; }
apt_install() {
    apt_update_once
    log "apt-get install $*"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null \
        || die "apt-get install $* failed."
}

# ---------------------------------------------------------------- processes and ports
# pid_alive <pidfile> <cmdline-marker>: prints the pid if it runs and its cmdline contains marker.
pid_alive() {
    local pidfile=$1 marker=$2 pid
    [[ -s "$pidfile" ]] || return 1
    pid="$(<"$pidfile")"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    [[ -r /proc/$pid/cmdline ]] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$marker" || return 1
    echo "$pid"
}

port_open() {  # port_open <port>: true if something accepts TCP on 127.0.0.1:<port>
    (exec 3<>"/dev/tcp/$CS_HOST/$1") 2>/dev/null
}

port_owner() {  # best effort description of the listener on <port>
    local out
    out="$(ss -Hltnp "sport = :$1" 2>/dev/null | head -1)"
    [[ -n "$out" ]] && echo "$out" | grep -o 'users:(.*)' && return
    echo "unknown process"
}

# ensure_port_free <port> <what> <env-var>: die with a clear message if taken.
ensure_port_free() {
    warn_ephemeral "$1" "$3"
    port_open "$1" || return 0
    die "port $1 ($2) is already in use by $(port_owner "$1"), which is not our $2. Stop it, or choose another port: export $3=<port>."
}

# warn_ephemeral <port> <env-var>: a listener port inside the kernel's ephemeral range can be
# taken at any moment by the local end of an outgoing connection (EADDRINUSE at random).
warn_ephemeral() {
    local lo hi
    read -r lo hi </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || return 0
    if (($1 >= lo && $1 <= hi)); then
        warn "port $1 ($2) lies in the ephemeral port range $lo-$hi: outgoing connections may occupy it. Prefer a port below $lo."
    fi
}

# start_daemon <pidfile> <logfile> <cwd> <cmd...>: detached (own session), stdin closed.
start_daemon() {
    local pidfile=$1 logfile=$2 cwd=$3; shift 3
    mkdir -p "$(dirname "$pidfile")" "$(dirname "$logfile")"
    ( cd "$cwd" && exec setsid "$@" </dev/null >>"$logfile" 2>&1 9>&- ) &
    echo $! >"$pidfile"
}

# already_running <pidfile> <marker> <who>: true, and logs "<who> already running (pid N)", if
# our process runs (a component's `_up` then has nothing to start); <who>: e.g. "registry:".
already_running() {
    local pid
    pid="$(pid_alive "$1" "$2")" || return 1
    log "$3 already running (pid $pid)"
}

# mvn_classpath <name> <pom> <classpath file> <what>: resolve the jars of <pom> (and their
# dependencies, cached in ~/.m2) into <classpath file>, unless it is newer than <pom>.
mvn_classpath() {
    local name=$1 pom=$2 cp=$3 what=$4 dir
    if [[ -s "$cp" && "$cp" -nt "$pom" ]]; then return 0; fi
    need_mvn
    dir="$(dirname "$cp")"
    log "$name: resolving $what from Maven Central (${pom#"$CS_REPO/"}, cached in ~/.m2)"
    mkdir -p "$dir"
    mvn -q -B -f "$pom" dependency:build-classpath -Dmdep.outputFile="$cp.tmp" >"$dir/mvn.log" 2>&1 \
        || { show_tail "$dir/mvn.log"; die "$name: mvn could not resolve ${pom#"$CS_REPO/"} (log: $dir/mvn.log)."; }
    mv "$cp.tmp" "$cp"
}

# stop_pid <pidfile> <marker> <name> [timeout]: TERM, wait, then KILL.
stop_pid() {
    local pidfile=$1 marker=$2 name=$3 timeout=${4:-30} pid i
    if ! pid="$(pid_alive "$pidfile" "$marker")"; then
        rm -f "$pidfile"; log "$name: not running"; return 0
    fi
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < timeout * 10; i++)); do
        [[ -d /proc/$pid ]] || break
        sleep 0.1
    done
    if [[ -d /proc/$pid ]]; then
        warn "$name (pid $pid) did not stop within ${timeout}s, killing it"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
    ok "$name: stopped"
}

# wait_until <timeout-seconds> <description> <logfile> <pidfile> <marker> <probe-cmd...>
# Polls probe every 0.25 s; fails early (with the log tail) if the process died.
wait_until() {
    local timeout=$1 what=$2 logfile=$3 pidfile=$4 marker=$5; shift 5
    local deadline=$((SECONDS + timeout))
    while ((SECONDS < deadline)); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        if [[ -n "$pidfile" ]] && ! pid_alive "$pidfile" "$marker" >/dev/null; then
            show_tail "$logfile"
            die "$what exited during start-up (log: $logfile)."
        fi
        sleep 0.25
    done
    show_tail "$logfile"
    die "$what not ready after ${timeout}s (log: $logfile)."
}

# wait_ready <name> <logfile> <pidfile> <marker> <probe args...>: wait_until the probe
# (2 s per attempt) answers, within CASESTREAM_READY_TIMEOUT seconds.
wait_ready() {
    local name=$1 logfile=$2 pidfile=$3 marker=$4; shift 4
    wait_until "$CASESTREAM_READY_TIMEOUT" "$name" "$logfile" "$pidfile" "$marker" probe "$@" --timeout 2
}

# daemon_status <name> <pidfile> <marker> <port> <address> <down note> <probe args...>: one
# status_line: up (our process runs and the probe answers), starting (it runs, the probe does
# not answer yet), foreign (another process holds <port>) or down (<address><down note>).
daemon_status() {
    local name=$1 pidfile=$2 marker=$3 port=$4 address=$5 note=$6 pid; shift 6
    if pid="$(pid_alive "$pidfile" "$marker")"; then
        if probe "$@" --timeout 2 2>/dev/null; then
            status_line "$name" up "$pid" "$address"
        else
            status_line "$name" starting "$pid" "$address"
        fi
    elif port_open "$port"; then
        status_line "$name" foreign - "$address (in use by $(port_owner "$port"))"
    else
        status_line "$name" down - "$address$note"
    fi
}

show_tail() {
    [[ -f "$1" ]] || return 0
    printf '%s---- last lines of %s ----%s\n' "$_c_dim" "$1" "$_c_off" >&2
    tail -n 25 "$1" >&2
    printf '%s----%s\n' "$_c_dim" "$_c_off" >&2
}

# probe <args...>: deploy/probe.py readiness checks (stdlib; kafka check needs the venv).
probe() {
    "$CASESTREAM_PYTHON" "$CS_DEPLOY_DIR/probe.py" "$@"
}
