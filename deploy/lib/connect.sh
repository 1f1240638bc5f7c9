# shellcheck shell=bash
# Kafka Connect 4.3.1 (distributed worker, one member) with the Debezium 3.6.1.Final PostgreSQL
# connector, from Maven Central jars. Off by default: `deploy/infra.sh up connect` or
# CASESTREAM_CONNECT=1 with `up`.
#   jars:     deploy/connect/pom.xml -> mvn dependency:build-classpath -> $CONNECT_DIR/classpath.txt
#   config:   deploy/connect/worker.properties.in -> $CONNECT_DIR/worker.properties
#   process:  java -cp <cp> org.apache.kafka.connect.cli.ConnectDistributed worker.properties
#   ready:    GET http://127.0.0.1:$CASESTREAM_CONNECT_PORT/connector-plugins lists PostgresConnector.
# Connectors are not created here: deploy/debezium/connector.py (or `casestream outbox handover`)
# puts one per service database through the REST API.

connect_vars() {
    CONNECT_DIR="$CS_LOCAL/connect"
    CONNECT_CP="$CONNECT_DIR/classpath.txt"
    CONNECT_CONF="$CONNECT_DIR/worker.properties"
    CONNECT_LOGS="$CONNECT_DIR/logs"
    CONNECT_PID="$CONNECT_DIR/connect.pid"
    CONNECT_MARK="ConnectDistributed $CONNECT_CONF"
    CONNECT_URL="http://$CS_HOST:$CASESTREAM_CONNECT_PORT"
}

connect_install() {
    local pom="$CS_DEPLOY_DIR/connect/pom.xml"
    if [[ -s "$CONNECT_CP" && "$CONNECT_CP" -nt "$pom" ]]; then return 0; fi
    need_mvn
    log "connect: resolving Kafka Connect + Debezium jars from Maven Central (deploy/connect/pom.xml, cached in ~/.m2)"
    mkdir -p "$CONNECT_DIR"
    mvn -q -B -f "$pom" dependency:build-classpath -Dmdep.outputFile="$CONNECT_CP.tmp" \
        >"$CONNECT_DIR/mvn.log" 2>&1 || { show_tail "$CONNECT_DIR/mvn.log"; die "connect: mvn could not resolve deploy/connect/pom.xml (log: $CONNECT_DIR/mvn.log)."; }
    mv "$CONNECT_CP.tmp" "$CONNECT_CP"
}

connect_up() {
    local pid
    if pid="$(pid_alive "$CONNECT_PID" "$CONNECT_MARK")"; then
        log "connect: already running (pid $pid)"
        return 0
    fi
    need_java 17 CASESTREAM_KAFKA_JAVA_HOME "Kafka Connect 4"
    ensure_port_free "$CASESTREAM_CONNECT_PORT" "Kafka Connect REST" CASESTREAM_CONNECT_PORT
    connect_install
    mkdir -p "$CONNECT_LOGS" "$CONNECT_DIR/plugins"
    sed -e "s|@PLUGIN_DIR@|$CONNECT_DIR/plugins|g" -e "s|@BOOTSTRAP@|$KAFKA_BOOTSTRAP|g" -e "s|@HOST@|$CS_HOST|g" \
        -e "s|@REST_PORT@|$CASESTREAM_CONNECT_PORT|g" -e "s|@RF@|$KAFKA_RF|g" \
        "$CS_DEPLOY_DIR/connect/worker.properties.in" >"$CONNECT_CONF"
    log "connect: starting the worker on $CONNECT_URL"
    start_daemon "$CONNECT_PID" "$CONNECT_LOGS/connect.out" "$CONNECT_DIR" \
        "$JAVA_BIN" "-Xmx$CASESTREAM_CONNECT_HEAP" "-Xms$CASESTREAM_CONNECT_HEAP" -XX:+UseG1GC \
        -Djava.awt.headless=true \
        -Dlog4j2.configurationFile="$CS_DEPLOY_DIR/connect/log4j2.xml" -Dconnect.logs.dir="$CONNECT_LOGS" \
        -cp "$(<"$CONNECT_CP")" org.apache.kafka.connect.cli.ConnectDistributed "$CONNECT_CONF"
}

connect_wait() {
    wait_until "$CASESTREAM_READY_TIMEOUT" "connect" "$CONNECT_LOGS/connect.log" "$CONNECT_PID" "$CONNECT_MARK" \
        probe http "$CONNECT_URL/connector-plugins?connectorsOnly=true" --timeout 2 --contains PostgresConnector
    ok "connect: ready on $CONNECT_URL (Debezium PostgreSQL connector loaded)"
}

connect_down() { stop_pid "$CONNECT_PID" "$CONNECT_MARK" connect 30; }

connect_status() {
    local pid
    if pid="$(pid_alive "$CONNECT_PID" "$CONNECT_MARK")"; then
        if probe http "$CONNECT_URL/" --timeout 2 2>/dev/null; then
            status_line connect up "$pid" "$CONNECT_URL"
        else
            status_line connect starting "$pid" "$CONNECT_URL"
        fi
    elif port_open "$CASESTREAM_CONNECT_PORT"; then
        status_line connect foreign - "$CONNECT_URL (in use by $(port_owner "$CASESTREAM_CONNECT_PORT"))"
    else
        status_line connect down - "$CONNECT_URL (off by default: deploy/infra.sh up connect)"
    fi
}

connect_logs() { echo "$CONNECT_LOGS/connect.log"; }
