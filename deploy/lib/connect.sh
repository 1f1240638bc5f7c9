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
    mvn_classpath connect "$CS_DEPLOY_DIR/connect/pom.xml" "$CONNECT_CP" "Kafka Connect + Debezium jars"
}

connect_up() {
    already_running "$CONNECT_PID" "$CONNECT_MARK" connect: && return 0
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
    wait_ready connect "$CONNECT_LOGS/connect.log" "$CONNECT_PID" "$CONNECT_MARK" \
        http "$CONNECT_URL/connector-plugins?connectorsOnly=true" --contains PostgresConnector
    ok "connect: ready on $CONNECT_URL (Debezium PostgreSQL connector loaded)"
}

connect_down() { stop_pid "$CONNECT_PID" "$CONNECT_MARK" connect 30; }

connect_status() {
    daemon_status connect "$CONNECT_PID" "$CONNECT_MARK" "$CASESTREAM_CONNECT_PORT" "$CONNECT_URL" \
        " (off by default: deploy/infra.sh up connect)" http "$CONNECT_URL/"
}

connect_logs() { echo "$CONNECT_LOGS/connect.log"; }
