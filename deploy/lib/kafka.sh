# shellcheck shell=bash
# Kafka 4.3 KRaft from Maven Central jars: one combined broker + controller node by default,
# CASESTREAM_KAFKA_BROKERS=3 for a three-node cluster (each node broker + controller voter).
#   jars:     deploy/kafka/pom.xml -> mvn dependency:build-classpath -> $KAFKA_DIR/classpath.txt (~/.m2 cache)
#   config:   deploy/kafka/server.properties.in -> <node dir>/server.properties (ports substituted)
#   storage:  kafka.tools.StorageTool format -t <cluster id> -c server.properties --ignore-formatted
#   process:  java -Xmx512m -cp <cp> kafka.Kafka server.properties  (log4j2 -> <node dir>/logs/)
#   ready:    a metadata request lists every node, then the outbox topics exist with leaders.
#   secured:  CASESTREAM_KAFKA_SECURE=1 (default) adds an SSL listener (TLS, no client
#             certificate) and a SASL_SSL listener (SCRAM-SHA-512, user `casestream`; and
#             OAUTHBEARER with Kafka's unsecured-JWT validator, for client tests only), with
#             test certificates from deploy/kafka/tls.sh in $KAFKA_DIR/tls.
# Node n (1-based) of a cluster lives in $KAFKA_DIR/node<n>/ and listens on node 1's ports
# + (n-1) * CASESTREAM_KAFKA_NODE_PORT_STEP; a single node keeps $KAFKA_DIR/ itself.

KAFKA_TOPIC_PARTITIONS=6
KAFKA_SCRAM_USER=casestream
KAFKA_TOPICS_CONF="$CS_DEPLOY_DIR/kafka/topics.conf"  # retention.ms per topic, with the reason

kafka_vars() {
    KAFKA_DIR="$CS_LOCAL/kafka"
    KAFKA_CP="$KAFKA_DIR/classpath.txt"
    KAFKA_TLS="$KAFKA_DIR/tls"
    KAFKA_NODES=$CASESTREAM_KAFKA_BROKERS
    if ((KAFKA_NODES > 1)); then KAFKA_RF=3 KAFKA_MIN_ISR=2; else KAFKA_RF=1 KAFKA_MIN_ISR=1; fi
    local n bootstrap=() ssl=() sasl=() voters=()
    for ((n = 1; n <= KAFKA_NODES; n++)); do
        kafka_node "$n"
        bootstrap+=("$CS_HOST:$NODE_PORT")
        ssl+=("$CS_HOST:$NODE_SSL_PORT")
        sasl+=("$CS_HOST:$NODE_SASL_PORT")
        voters+=("$n@$CS_HOST:$NODE_CONTROLLER_PORT")
    done
    KAFKA_BOOTSTRAP="$(IFS=,; echo "${bootstrap[*]}")"
    KAFKA_SSL_BOOTSTRAP="$(IFS=,; echo "${ssl[*]}")"
    KAFKA_SASL_BOOTSTRAP="$(IFS=,; echo "${sasl[*]}")"
    KAFKA_VOTERS="$(IFS=,; echo "${voters[*]}")"
    kafka_node 1
    KAFKA_LOGS="$NODE_LOGS"  # node 1's, for `logs`
}

kafka_node() {  # kafka_node <n>: the NODE_* paths and ports of node n
    NODE_ID=$1
    local shift=$(( (NODE_ID - 1) * CASESTREAM_KAFKA_NODE_PORT_STEP ))
    if ((KAFKA_NODES > 1)); then NODE_DIR="$KAFKA_DIR/node$NODE_ID"; else NODE_DIR="$KAFKA_DIR"; fi
    NODE_CONF="$NODE_DIR/server.properties"
    NODE_DATA="$NODE_DIR/data"
    NODE_LOGS="$NODE_DIR/logs"
    NODE_PID="$NODE_DIR/kafka.pid"
    NODE_OUT="$NODE_LOGS/kafka.out"
    NODE_MARK="kafka.Kafka $NODE_CONF"
    NODE_PORT=$((CASESTREAM_KAFKA_PORT + shift))
    NODE_CONTROLLER_PORT=$((CASESTREAM_KAFKA_CONTROLLER_PORT + shift))
    NODE_SSL_PORT=$((CASESTREAM_KAFKA_SSL_PORT + shift))
    NODE_SASL_PORT=$((CASESTREAM_KAFKA_SASL_PORT + shift))
}

kafka_install() {
    mvn_classpath kafka "$CS_DEPLOY_DIR/kafka/pom.xml" "$KAFKA_CP" jars
}

kafka_need_java() {  # KAFKA_JAVA: Java 17+, looked up once per run (each look-up starts a JVM)
    [[ -n "${KAFKA_JAVA:-}" ]] && return 0
    need_java 17 CASESTREAM_KAFKA_JAVA_HOME "Kafka 4"
    KAFKA_JAVA=$JAVA_BIN
}

# JVM options that favour start-up over throughput, as the registry's: serial GC and the C1
# compiler only (-XX:TieredStopAtLevel=1: no C2 compiler threads competing for the CPU). Measured
# on 2 cores: a storage format 14-16 s -> 4 s at load ~24; one node 7-10 s -> 4-5 s at load ~4.
# (A class-data-sharing archive gained nothing measurable for a node, and writing one costs more
# than it saves on a fresh checkout.)
KAFKA_QUICK_JVM=(-XX:+UseSerialGC -XX:TieredStopAtLevel=1)

kafka_java() {  # kafka_java <main class> <args...> (foreground tools: StorageTool; always quick)
    "$KAFKA_JAVA" -Xmx256m "${KAFKA_QUICK_JVM[@]}" -cp "$(<"$KAFKA_CP")" \
        -Dlog4j2.configurationFile="$CS_DEPLOY_DIR/kafka/log4j2.xml" -Dkafka.logs.dir="$NODE_LOGS" "$@"
}

kafka_cluster_id() {  # one id for every node of this .local, made once
    local file="$KAFKA_DIR/cluster.id"
    if [[ ! -s "$file" ]]; then
        mkdir -p "$KAFKA_DIR"
        "$CASESTREAM_PYTHON" -c 'import base64,uuid;print(base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="))' >"$file"
    fi
    cat "$file"
}

kafka_configure() {  # render and format node $NODE_ID
    mkdir -p "$NODE_DATA" "$NODE_LOGS"
    local listeners="PLAINTEXT://$CS_HOST:$NODE_PORT,CONTROLLER://$CS_HOST:$NODE_CONTROLLER_PORT"
    local advertised="PLAINTEXT://$CS_HOST:$NODE_PORT"
    local map="CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
    if [[ "$CASESTREAM_KAFKA_SECURE" == 1 ]]; then
        listeners+=",SSL://$CS_HOST:$NODE_SSL_PORT,SASL_SSL://$CS_HOST:$NODE_SASL_PORT"
        advertised+=",SSL://$CS_HOST:$NODE_SSL_PORT,SASL_SSL://$CS_HOST:$NODE_SASL_PORT"
        map+=",SSL:SSL,SASL_SSL:SASL_SSL"
    fi
    sed -e "s|@NODE_ID@|$NODE_ID|g" -e "s|@QUORUM_VOTERS@|$KAFKA_VOTERS|g" \
        -e "s|@LISTENERS@|$listeners|g" -e "s|@ADVERTISED_LISTENERS@|$advertised|g" \
        -e "s|@PROTOCOL_MAP@|$map|g" -e "s|@RF@|$KAFKA_RF|g" -e "s|@MIN_ISR@|$KAFKA_MIN_ISR|g" \
        -e "s|@DATA_DIR@|$NODE_DATA|g" \
        "$CS_DEPLOY_DIR/kafka/server.properties.in" >"$NODE_CONF.tmp"
    if [[ "$CASESTREAM_KAFKA_SECURE" == 1 ]]; then
        cat >>"$NODE_CONF.tmp" <<PROPS

# Secured listeners (CASESTREAM_KAFKA_SECURE=1), test certificates of deploy/kafka/tls.sh.
ssl.keystore.type=PKCS12
ssl.keystore.location=$KAFKA_TLS/broker.p12
ssl.keystore.password=$(<"$KAFKA_TLS/store.password")
ssl.key.password=$(<"$KAFKA_TLS/store.password")
ssl.client.auth=none
sasl.enabled.mechanisms=SCRAM-SHA-512,OAUTHBEARER
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
# OAUTHBEARER without a server callback handler: Kafka's OAuthBearerUnsecuredValidatorCallbackHandler
# (unsigned JWS, alg "none"; it checks expiry and the required scope). A test of the client
# side only: never a production set-up.
listener.name.sasl_ssl.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="broker" unsecuredValidatorRequiredScope="casestream.clients";
PROPS
    fi
    mv "$NODE_CONF.tmp" "$NODE_CONF"
    if [[ ! -f "$NODE_DATA/meta.properties" ]]; then
        local cluster_id
        cluster_id="$(kafka_cluster_id)"
        log "kafka: formatting node $NODE_ID storage (cluster id $cluster_id)"
        kafka_java kafka.tools.StorageTool format -t "$cluster_id" -c "$NODE_CONF" --ignore-formatted \
            >"$NODE_LOGS/format.log" 2>&1 || { show_tail "$NODE_LOGS/format.log"; die "kafka: storage format of node $NODE_ID failed."; }
    fi
}

kafka_up() {
    local n pids=()
    # Every node's storage is formatted before any node starts, the nodes' formats side by side:
    # a format is a JVM of its own, and on a small machine it would compete for the CPU with the
    # nodes already booting.
    kafka_need_java
    kafka_install
    # what the nodes share is made once, before they are prepared side by side
    kafka_cluster_id >/dev/null
    if [[ "$CASESTREAM_KAFKA_SECURE" == 1 ]]; then
        bash "$CS_DEPLOY_DIR/kafka/tls.sh" "$KAFKA_TLS" || die "kafka: could not make the test certificates in $KAFKA_TLS."
    fi
    for ((n = 1; n <= KAFKA_NODES; n++)); do
        kafka_node "$n"
        pid_alive "$NODE_PID" "$NODE_MARK" >/dev/null && continue
        kafka_prepare_node "$n" &
        pids+=($!)
    done
    for n in "${pids[@]}"; do wait "$n" || die "kafka: a node could not be prepared (see above)."; done
    for ((n = 1; n <= KAFKA_NODES; n++)); do kafka_up_node "$n"; done
    kafka_node 1
}

kafka_prepare_node() {  # kafka_prepare_node <n>: check ports, render the config, format the storage
    kafka_node "$1"
    kafka_need_java
    ensure_port_free "$NODE_PORT" "Kafka" CASESTREAM_KAFKA_PORT
    ensure_port_free "$NODE_CONTROLLER_PORT" "Kafka controller" CASESTREAM_KAFKA_CONTROLLER_PORT
    if [[ "$CASESTREAM_KAFKA_SECURE" == 1 ]]; then
        ensure_port_free "$NODE_SSL_PORT" "Kafka SSL listener" CASESTREAM_KAFKA_SSL_PORT
        ensure_port_free "$NODE_SASL_PORT" "Kafka SASL_SSL listener" CASESTREAM_KAFKA_SASL_PORT
        bash "$CS_DEPLOY_DIR/kafka/tls.sh" "$KAFKA_TLS" || die "kafka: could not make the test certificates in $KAFKA_TLS."
    fi
    kafka_install
    kafka_configure
}

kafka_up_node() {  # kafka_up_node <n>: start node n unless it runs (does not wait)
    local n=$1 jvm=()
    kafka_node "$n"
    already_running "$NODE_PID" "$NODE_MARK" "kafka: node $n" && return 0
    kafka_prepare_node "$n"
    if [[ "$CASESTREAM_KAFKA_QUICK_START" == 1 ]]; then
        jvm=("${KAFKA_QUICK_JVM[@]}")
    else
        jvm=(-XX:+UseG1GC -XX:MaxGCPauseMillis=20)
    fi
    log "kafka: starting node $n on $CS_HOST:$NODE_PORT (controller :$NODE_CONTROLLER_PORT)"
    start_daemon "$NODE_PID" "$NODE_OUT" "$NODE_DIR" \
        "$KAFKA_JAVA" "-Xmx$CASESTREAM_KAFKA_HEAP" "-Xms$CASESTREAM_KAFKA_HEAP" "${jvm[@]}" \
        -Djava.awt.headless=true \
        -Dlog4j2.configurationFile="$CS_DEPLOY_DIR/kafka/log4j2.xml" -Dkafka.logs.dir="$NODE_LOGS" \
        -cp "$(<"$KAFKA_CP")" kafka.Kafka "$NODE_CONF"
}

kafka_wait() {
    local n
    for ((n = 1; n <= KAFKA_NODES; n++)); do
        kafka_node "$n"
        wait_ready "kafka node $n" "$NODE_LOGS/server.log" "$NODE_PID" "$NODE_MARK" \
            kafka --bootstrap "$KAFKA_BOOTSTRAP" --brokers "$KAFKA_NODES"
    done
    local topic retention _reason pids=() topics=() i
    # one probe per topic (each has its own retention), side by side
    while read -r topic retention _reason; do
        [[ -z "$topic" || "$topic" == \#* ]] && continue
        probe topics --bootstrap "$KAFKA_BOOTSTRAP" --partitions "$KAFKA_TOPIC_PARTITIONS" \
            --replication "$KAFKA_RF" --config "retention.ms=$retention" \
            --config "min.insync.replicas=$KAFKA_MIN_ISR" --alter "$topic" &
        pids+=($!) topics+=("$topic")
    done <"$KAFKA_TOPICS_CONF"
    for i in "${!pids[@]}"; do
        wait "${pids[$i]}" || die "kafka: could not create the outbox topic ${topics[$i]} (log: $KAFKA_LOGS/server.log)."
    done
    if [[ "$CASESTREAM_KAFKA_SECURE" == 1 ]]; then
        probe scram-user --bootstrap "$KAFKA_BOOTSTRAP" --user "$KAFKA_SCRAM_USER" \
            --password-file "$KAFKA_TLS/scram.password" \
            || die "kafka: could not create the SCRAM user $KAFKA_SCRAM_USER (log: $KAFKA_LOGS/server.log)."
    fi
    ok "kafka: ready on $KAFKA_BOOTSTRAP ($KAFKA_NODES node(s), replication factor $KAFKA_RF)"
}

kafka_down() {
    local n
    for ((n = KAFKA_NODES; n >= 1; n--)); do
        kafka_node "$n"
        stop_pid "$NODE_PID" "$NODE_MARK" "kafka node $n" 60
    done
    kafka_node 1
}

kafka_status() {
    local n
    for ((n = 1; n <= KAFKA_NODES; n++)); do
        kafka_node "$n"
        daemon_status kafka "$NODE_PID" "$NODE_MARK" "$NODE_PORT" "$CS_HOST:$NODE_PORT" "" \
            kafka --bootstrap "$CS_HOST:$NODE_PORT"
    done
    kafka_node 1
}

kafka_logs() { echo "$KAFKA_LOGS/server.log"; }
