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

: "${REGISTRY_VERSION:=3.3.3}"

registry_vars() {
    REG_DIR="$CS_LOCAL/apicurio"
    REG_APP="$REG_DIR/app-$REGISTRY_VERSION"
    REG_PID="$REG_DIR/registry.pid"
    REG_LOG="$REG_DIR/registry.log"
    REG_MARK="quarkus-run.jar"
    REG_BASE="http://$CS_HOST:$CASESTREAM_REGISTRY_PORT"
    REG_URL="$REG_BASE/apis/ccompat/v7"
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
    log "registry: starting Apicurio Registry $REGISTRY_VERSION on $REG_BASE (storage: PostgreSQL db 'registry')"
    start_daemon "$REG_PID" "$REG_LOG" "$REG_APP" \
        "$JAVA_BIN" "-Xmx$CASESTREAM_REGISTRY_HEAP" -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true \
        -XX:+AutoCreateSharedArchive -XX:SharedArchiveFile="$REG_DIR/registry-$REGISTRY_VERSION.jsa" -Xlog:cds=off -Xlog:cds+dynamic=off \
        -Dquarkus.http.host="$CS_HOST" -Dquarkus.http.port="$CASESTREAM_REGISTRY_PORT" \
        -Dquarkus.http.access-log.enabled=false \
        -Dquarkus.management.host="$CS_HOST" -Dquarkus.management.port="$CASESTREAM_REGISTRY_MGMT_PORT" \
        -Dquarkus.log.console.format='%d{yyyy-MM-dd HH:mm:ss} %p [%c{1}] %m%n' \
        -Dapicurio.storage.kind=sql -Dapicurio.storage.sql.kind=postgresql \
        -Dapicurio.datasource.url="jdbc:postgresql://$CS_HOST:$CASESTREAM_PG_PORT/registry" \
        -Dapicurio.datasource.username=postgres -Dapicurio.datasource.password=unused-trust-auth \
        -Dapicurio.datasource.jdbc.initial-size=2 -Dapicurio.datasource.jdbc.min-size=2 \
        -Dapicurio.datasource.jdbc.max-size=20 \
        -Dapicurio.ccompat.legacy-id-mode.enabled=false \
        -Dapicurio.ccompat.use-canonical-hash=false \
        -Dapicurio.rules.global.compatibility=BACKWARD \
        -Dapicurio.rest.deletion.group.enabled=true -Dapicurio.rest.deletion.artifact.enabled=true \
        -Dapicurio.rest.deletion.artifact-version.enabled=true \
        -jar quarkus-run.jar
}

registry_wait() {
    wait_ready registry "$REG_LOG" "$REG_PID" "$REG_MARK" http "$REG_URL/subjects"
    ok "registry: ready on $REG_URL"
}

registry_down() { stop_pid "$REG_PID" "$REG_MARK" registry 30; }

registry_status() {
    daemon_status registry "$REG_PID" "$REG_MARK" "$CASESTREAM_REGISTRY_PORT" "$REG_URL" "" \
        http "$REG_URL/subjects"
}

registry_logs() { echo "$REG_LOG"; }
