# shellcheck shell=bash
# Kafka 4.3 KRaft single node (combined broker + controller) from Maven Central jars.
#   jars:     deploy/kafka/pom.xml -> mvn dependency:build-classpath -> $KAFKA_DIR/classpath.txt (~/.m2 cache)
#   config:   deploy/kafka/server.properties.in -> $KAFKA_DIR/server.properties (ports substituted)
#   storage:  kafka.tools.StorageTool format -t <cluster id> -c server.properties --ignore-formatted
#   process:  java -Xmx512m -cp <cp> kafka.Kafka server.properties  (log4j2 -> $KAFKA_DIR/logs/)
#   ready:    a metadata request through the admin client, then the outbox topics exist with leaders.

KAFKA_TOPIC_PARTITIONS=6
KAFKA_TOPICS_CONF="$CS_DEPLOY_DIR/kafka/topics.conf"  # retention.ms per topic, with the reason

kafka_vars() {
    KAFKA_DIR="$CS_LOCAL/kafka"
    KAFKA_CP="$KAFKA_DIR/classpath.txt"
    KAFKA_CONF="$KAFKA_DIR/server.properties"
    KAFKA_DATA="$KAFKA_DIR/data"
    KAFKA_LOGS="$KAFKA_DIR/logs"
    KAFKA_PID="$KAFKA_DIR/kafka.pid"
    KAFKA_OUT="$KAFKA_LOGS/kafka.out"
    KAFKA_MARK="kafka.Kafka $KAFKA_CONF"
    KAFKA_BOOTSTRAP="$CS_HOST:$CASESTREAM_KAFKA_PORT"
}

kafka_install() {
    local pom="$CS_DEPLOY_DIR/kafka/pom.xml"
    if [[ -s "$KAFKA_CP" && "$KAFKA_CP" -nt "$pom" ]]; then return 0; fi
    need_mvn
    log "kafka: resolving jars from Maven Central (deploy/kafka/pom.xml, cached in ~/.m2)"
    mkdir -p "$KAFKA_DIR"
    mvn -q -B -f "$pom" dependency:build-classpath -Dmdep.outputFile="$KAFKA_CP.tmp" \
        >"$KAFKA_DIR/mvn.log" 2>&1 || { show_tail "$KAFKA_DIR/mvn.log"; die "kafka: mvn could not resolve deploy/kafka/pom.xml (log: $KAFKA_DIR/mvn.log)."; }
    mv "$KAFKA_CP.tmp" "$KAFKA_CP"
}

kafka_java() {  # kafka_java <main class> <args...> (foreground tools: StorageTool)
    "$JAVA_BIN" -Xmx256m -cp "$(<"$KAFKA_CP")" \
        -Dlog4j2.configurationFile="$CS_DEPLOY_DIR/kafka/log4j2.xml" -Dkafka.logs.dir="$KAFKA_LOGS" "$@"
}

kafka_configure() {
    mkdir -p "$KAFKA_DATA" "$KAFKA_LOGS"
    sed -e "s|@KAFKA_PORT@|$CASESTREAM_KAFKA_PORT|g" \
        -e "s|@CONTROLLER_PORT@|$CASESTREAM_KAFKA_CONTROLLER_PORT|g" \
        -e "s|@DATA_DIR@|$KAFKA_DATA|g" \
        "$CS_DEPLOY_DIR/kafka/server.properties.in" >"$KAFKA_CONF.tmp"
    mv "$KAFKA_CONF.tmp" "$KAFKA_CONF"
    if [[ ! -f "$KAFKA_DATA/meta.properties" ]]; then
        local cluster_id
        cluster_id="$("$CASESTREAM_PYTHON" -c 'import base64,uuid;print(base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="))')"
        log "kafka: formatting storage (cluster id $cluster_id)"
        kafka_java kafka.tools.StorageTool format -t "$cluster_id" -c "$KAFKA_CONF" --ignore-formatted \
            >"$KAFKA_LOGS/format.log" 2>&1 || { show_tail "$KAFKA_LOGS/format.log"; die "kafka: storage format failed."; }
    fi
}

kafka_up() {
    local pid
    if pid="$(pid_alive "$KAFKA_PID" "$KAFKA_MARK")"; then
        log "kafka: already running (pid $pid)"
    else
        need_java 17 CASESTREAM_KAFKA_JAVA_HOME "Kafka 4"
        ensure_port_free "$CASESTREAM_KAFKA_PORT" "Kafka" CASESTREAM_KAFKA_PORT
        ensure_port_free "$CASESTREAM_KAFKA_CONTROLLER_PORT" "Kafka controller" CASESTREAM_KAFKA_CONTROLLER_PORT
        kafka_install
        kafka_configure
        log "kafka: starting on $KAFKA_BOOTSTRAP (controller :$CASESTREAM_KAFKA_CONTROLLER_PORT)"
        start_daemon "$KAFKA_PID" "$KAFKA_OUT" "$KAFKA_DIR" \
            "$JAVA_BIN" "-Xmx$CASESTREAM_KAFKA_HEAP" "-Xms$CASESTREAM_KAFKA_HEAP" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
            -Djava.awt.headless=true \
            -Dlog4j2.configurationFile="$CS_DEPLOY_DIR/kafka/log4j2.xml" -Dkafka.logs.dir="$KAFKA_LOGS" \
            -cp "$(<"$KAFKA_CP")" kafka.Kafka "$KAFKA_CONF"
    fi
}

kafka_wait() {
    wait_until "$CASESTREAM_READY_TIMEOUT" "kafka" "$KAFKA_LOGS/server.log" "$KAFKA_PID" "$KAFKA_MARK" \
        probe kafka --bootstrap "$KAFKA_BOOTSTRAP" --timeout 2
    local topic retention _reason
    while read -r topic retention _reason; do
        [[ -z "$topic" || "$topic" == \#* ]] && continue
        probe topics --bootstrap "$KAFKA_BOOTSTRAP" --partitions "$KAFKA_TOPIC_PARTITIONS" \
            --config "retention.ms=$retention" --alter "$topic" \
            || die "kafka: could not create the outbox topic $topic (log: $KAFKA_LOGS/server.log)."
    done <"$KAFKA_TOPICS_CONF"
    ok "kafka: ready on $KAFKA_BOOTSTRAP"
}

kafka_down() { stop_pid "$KAFKA_PID" "$KAFKA_MARK" kafka 60; }

kafka_status() {
    local pid
    if pid="$(pid_alive "$KAFKA_PID" "$KAFKA_MARK")"; then
        if probe kafka --bootstrap "$KAFKA_BOOTSTRAP" --timeout 2 2>/dev/null; then
            status_line kafka up "$pid" "$KAFKA_BOOTSTRAP"
        else
            status_line kafka starting "$pid" "$KAFKA_BOOTSTRAP"
        fi
    elif port_open "$CASESTREAM_KAFKA_PORT"; then
        status_line kafka foreign - "$KAFKA_BOOTSTRAP (in use by $(port_owner "$CASESTREAM_KAFKA_PORT"))"
    else
        status_line kafka down - "$KAFKA_BOOTSTRAP"
    fi
}

kafka_logs() { echo "$KAFKA_LOGS/server.log"; }
