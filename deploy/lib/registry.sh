# shellcheck shell=bash
# Apicurio Registry 3.x (Quarkus fast-jar from Maven Central) with SQL storage in our PostgreSQL
# (database `registry`), so schema ids survive restarts of the registry and of `infra.sh down`.
#   install: mvn dependency:copy io.apicurio:apicurio-registry-app:$REGISTRY_VERSION:tar.gz:all
#            -> $CS_LOCAL/apicurio/app (unpacked once; tarball cached in ~/.m2)
#   run:     java -jar quarkus-run.jar -Dquarkus.http.host=127.0.0.1 -Dquarkus.http.port=18081 ...
#   ready:   HTTP GET /apis/ccompat/v7/subjects answers 200.
#
# Confluent API notes (checked against confluent_kafka's SchemaRegistryClient, see the report in
# deploy/README.md): ccompat ids are Apicurio *content ids* (legacy-id-mode off, the default), so
# the id in the wire format resolves through GET /schemas/ids/{id}, and the same schema under two
# subjects gets one id, as with Confluent's registry.
# use-canonical-hash=false: a lookup matches the exact schema text first (then Apicurio's canonical
# form), so catalog versions differing only in docs, aliases or enum defaults each find their own
# version; `casestream schemas register` stores such a version as a distinct one (Apicurio's
# Confluent API folds it into the existing version, whatever this setting says).
#
# Authentication (off by default; either setting turns it on for every API, reads included):
#   CASESTREAM_REGISTRY_JWT_PUBLIC_KEY_FILE  PEM public key: bearer JWTs signed with its private key
#       are verified locally (Quarkus OIDC `quarkus.oidc.public-key`, `quarkus.oidc.tenant-enabled`;
#       no OIDC server is contacted);
#   CASESTREAM_REGISTRY_USERS_FILE  `user=password` lines: HTTP basic for those users (Quarkus
#       embedded users, `quarkus.http.auth.basic`).
#   Any authenticated caller may do everything (`apicurio.auth.role-based-authorization` stays off).
#   The settings go to $REG_DIR/<name>-auth.properties (mode 600; `quarkus.config.locations`), not to
#   the command line. Readiness is then the management port's /health/ready.
# CASESTREAM_REGISTRY_STORAGE=memory keeps artifacts in an in-memory H2 database (lost at stop:
# for a throwaway registry) instead of the PostgreSQL database `registry`.

: "${REGISTRY_VERSION:=3.3.3}"

registry_vars() {
    REG_DIR="$CS_LOCAL/apicurio"
    REG_APP="$REG_DIR/app-$REGISTRY_VERSION"
    REG_NAME=${CASESTREAM_REGISTRY_NAME:-registry}
    [[ "$REG_NAME" =~ ^[a-z0-9][a-z0-9-]*$ ]] \
        || die "CASESTREAM_REGISTRY_NAME='$REG_NAME': lower-case letters, digits and '-'."
    REG_PID="$REG_DIR/$REG_NAME.pid"
    REG_LOG="$REG_DIR/$REG_NAME.log"
    REG_MARK="quarkus-run.jar"
    REG_BASE="http://$CS_HOST:$CASESTREAM_REGISTRY_PORT"
    REG_URL="$REG_BASE/apis/ccompat/v7"
    REG_AUTH_CONF="$REG_DIR/$REG_NAME-auth.properties"
    REG_READY_URL="$REG_URL/subjects"
    if registry_auth_on; then REG_READY_URL="http://$CS_HOST:$CASESTREAM_REGISTRY_MGMT_PORT/health/ready"; fi
}

registry_auth_on() { [[ -n "${CASESTREAM_REGISTRY_JWT_PUBLIC_KEY_FILE:-}${CASESTREAM_REGISTRY_USERS_FILE:-}" ]]; }

registry_auth_config() {  # writes $REG_AUTH_CONF from the authentication settings
    local key_file=${CASESTREAM_REGISTRY_JWT_PUBLIC_KEY_FILE:-} users=${CASESTREAM_REGISTRY_USERS_FILE:-}
    local user password
    mkdir -p "$REG_DIR"
    ( umask 077
      {
        echo "# written by deploy/lib/registry.sh from CASESTREAM_REGISTRY_JWT_PUBLIC_KEY_FILE / _USERS_FILE"
        if [[ -n "$key_file" ]]; then
            [[ -r "$key_file" ]] || die "CASESTREAM_REGISTRY_JWT_PUBLIC_KEY_FILE=$key_file: cannot read the file."
            grep -q -- "-----BEGIN PUBLIC KEY-----" "$key_file" \
                || die "CASESTREAM_REGISTRY_JWT_PUBLIC_KEY_FILE=$key_file: not a PEM public key (BEGIN PUBLIC KEY)."
            echo "quarkus.oidc.tenant-enabled=true"
            # the base64 body of the PEM, which is what quarkus.oidc.public-key takes
            echo "quarkus.oidc.public-key=$(grep -v -- '-----' "$key_file" | tr -d '\n\r ')"
        fi
        if [[ -n "$users" ]]; then
            [[ -r "$users" ]] || die "CASESTREAM_REGISTRY_USERS_FILE=$users: cannot read the file."
            echo "quarkus.http.auth.basic=true"
            echo "quarkus.security.users.embedded.enabled=true"
            echo "quarkus.security.users.embedded.plain-text=true"
            while IFS='=' read -r user password; do
                [[ -z "$user" || "$user" == \#* ]] && continue
                [[ "$user" =~ ^[A-Za-z0-9._-]+$ && -n "$password" ]] \
                    || die "CASESTREAM_REGISTRY_USERS_FILE=$users: '$user': want user=password lines (user: letters, digits, . _ -)."
                echo "quarkus.security.users.embedded.users.$user=$password"
            done <"$users"
        fi
      } >"$REG_AUTH_CONF.tmp" )
    mv "$REG_AUTH_CONF.tmp" "$REG_AUTH_CONF"
}

registry_install() {
    [[ -f "$REG_APP/quarkus-run.jar" ]] && return 0
    need_mvn
    local art="io.apicurio:apicurio-registry-app:$REGISTRY_VERSION:tar.gz:all"
    local tgz="$REG_DIR/apicurio-registry-app-$REGISTRY_VERSION-all.tar.gz"
    mkdir -p "$REG_DIR"
    if [[ ! -s "$tgz" ]]; then
        log "registry: fetching $art from Maven Central (cached in ~/.m2)"
        mvn -q -B org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy -Dartifact="$art" \
            -DoutputDirectory="$REG_DIR" >"$REG_DIR/mvn.log" 2>&1 \
            || { show_tail "$REG_DIR/mvn.log"; die "registry: mvn could not fetch $art (log: $REG_DIR/mvn.log)."; }
    fi
    log "registry: unpacking $(basename "$tgz")"
    rm -rf "$REG_APP.tmp" && mkdir -p "$REG_APP.tmp"
    tar -xzf "$tgz" -C "$REG_APP.tmp" || die "registry: could not unpack $tgz."
    [[ -f "$REG_APP.tmp/quarkus-run.jar" ]] || die "registry: $tgz has no quarkus-run.jar."
    mv "$REG_APP.tmp" "$REG_APP"
    rm -f "$tgz"
}

registry_up() {
    already_running "$REG_PID" "$REG_MARK" registry: && return 0
    need_java 21 CASESTREAM_REGISTRY_JAVA_HOME "Apicurio Registry $REGISTRY_VERSION (built for Java 21)"
    ensure_port_free "$CASESTREAM_REGISTRY_PORT" "schema registry" CASESTREAM_REGISTRY_PORT
    ensure_port_free "$CASESTREAM_REGISTRY_MGMT_PORT" "schema registry management" CASESTREAM_REGISTRY_MGMT_PORT
    registry_install
    local storage=(-Dapicurio.storage.kind=sql -Dapicurio.storage.sql.kind=postgresql
        -Dapicurio.datasource.url="jdbc:postgresql://$CS_HOST:$CASESTREAM_PG_PORT/registry"
        -Dapicurio.datasource.username=postgres -Dapicurio.datasource.password=unused-trust-auth
        -Dapicurio.datasource.jdbc.initial-size=2 -Dapicurio.datasource.jdbc.min-size=2
        -Dapicurio.datasource.jdbc.max-size=20) what="PostgreSQL db 'registry'" auth=()
    if [[ "$CASESTREAM_REGISTRY_STORAGE" == memory ]]; then
        # Apicurio's default datasource: H2 in memory
        storage=(-Dapicurio.storage.kind=sql -Dapicurio.storage.sql.kind=h2
            -Dapicurio.datasource.jdbc.initial-size=2 -Dapicurio.datasource.jdbc.min-size=2) what="in memory"
    fi
    if registry_auth_on; then
        registry_auth_config
        auth=(-Dquarkus.config.locations="file:$REG_AUTH_CONF")
        what+=", authentication required"
    fi
    log "registry: starting Apicurio Registry $REGISTRY_VERSION on $REG_BASE (storage: $what)"
    start_daemon "$REG_PID" "$REG_LOG" "$REG_APP" \
        "$JAVA_BIN" "-Xmx$CASESTREAM_REGISTRY_HEAP" -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true \
        -XX:+AutoCreateSharedArchive -XX:SharedArchiveFile="$REG_DIR/registry-$REGISTRY_VERSION.jsa" -Xlog:cds=off -Xlog:cds+dynamic=off \
        -Dquarkus.http.host="$CS_HOST" -Dquarkus.http.port="$CASESTREAM_REGISTRY_PORT" \
        -Dquarkus.http.access-log.enabled=false \
        -Dquarkus.management.host="$CS_HOST" -Dquarkus.management.port="$CASESTREAM_REGISTRY_MGMT_PORT" \
        -Dquarkus.log.console.format='%d{yyyy-MM-dd HH:mm:ss} %p [%c{1}] %m%n' \
        "${storage[@]}" "${auth[@]}" \
        -Dapicurio.ccompat.legacy-id-mode.enabled=false \
        -Dapicurio.ccompat.use-canonical-hash=false \
        -Dapicurio.rules.global.compatibility=BACKWARD \
        -Dapicurio.rest.deletion.group.enabled=true -Dapicurio.rest.deletion.artifact.enabled=true \
        -Dapicurio.rest.deletion.artifact-version.enabled=true \
        -jar quarkus-run.jar
}

registry_wait() {
    wait_ready registry "$REG_LOG" "$REG_PID" "$REG_MARK" http "$REG_READY_URL"
    ok "registry: ready on $REG_URL"
}

registry_down() {
    local pid
    if [[ "$CASESTREAM_REGISTRY_STORAGE" == memory ]]; then
        # Nothing to keep in memory, so SIGKILL: a stop would write the class-data archive (~10 s).
        if pid="$(pid_alive "$REG_PID" "$REG_MARK")"; then
            kill -KILL "$pid"
            while [[ -d /proc/$pid ]]; do sleep 0.05; done
        fi
        rm -f "$REG_PID"
        ok "registry $REG_NAME: killed (in-memory storage)"
        return 0
    fi
    stop_pid "$REG_PID" "$REG_MARK" registry 30
}

registry_status() {
    daemon_status registry "$REG_PID" "$REG_MARK" "$CASESTREAM_REGISTRY_PORT" "$REG_URL" "" \
        http "$REG_READY_URL"
}

registry_logs() { echo "$REG_LOG"; }
