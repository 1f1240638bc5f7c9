# shellcheck shell=bash
# SMTP sink (deploy/smtp_sink.py, aiosmtpd from the venv) on 127.0.0.1:12525,
# one .eml file per message in $CS_LOCAL/smtp/mail. Ready: an SMTP greeting + NOOP.

smtp_vars() {
    SMTP_DIR="$CS_LOCAL/smtp"
    : "${CASESTREAM_SMTP_MAILDIR:=$SMTP_DIR/mail}"
    SMTP_PID="$SMTP_DIR/smtp.pid"
    SMTP_LOG="$SMTP_DIR/smtp.log"
    SMTP_MARK="smtp_sink.py"
}

smtp_up() {
    already_running "$SMTP_PID" "$SMTP_MARK" smtp: && return 0
    ensure_port_free "$CASESTREAM_SMTP_PORT" "SMTP sink" CASESTREAM_SMTP_PORT
    mkdir -p "$CASESTREAM_SMTP_MAILDIR"
    log "smtp: starting the sink on $CS_HOST:$CASESTREAM_SMTP_PORT (mail in $CASESTREAM_SMTP_MAILDIR)"
    start_daemon "$SMTP_PID" "$SMTP_LOG" "$SMTP_DIR" \
        "$CASESTREAM_PYTHON" "$CS_DEPLOY_DIR/smtp_sink.py" --host "$CS_HOST" \
        --port "$CASESTREAM_SMTP_PORT" --maildir "$CASESTREAM_SMTP_MAILDIR"
}

smtp_wait() {
    wait_ready smtp "$SMTP_LOG" "$SMTP_PID" "$SMTP_MARK" smtp "$CS_HOST" "$CASESTREAM_SMTP_PORT"
    ok "smtp: ready on $CS_HOST:$CASESTREAM_SMTP_PORT"
}

smtp_down() { stop_pid "$SMTP_PID" "$SMTP_MARK" smtp 10; }

smtp_status() {
    local pid
    if pid="$(pid_alive "$SMTP_PID" "$SMTP_MARK")"; then
        if probe smtp "$CS_HOST" "$CASESTREAM_SMTP_PORT" --timeout 2 2>/dev/null; then
            status_line smtp up "$pid" "$CS_HOST:$CASESTREAM_SMTP_PORT -> $CASESTREAM_SMTP_MAILDIR"
        else
            status_line smtp starting "$pid" "$CS_HOST:$CASESTREAM_SMTP_PORT"
        fi
    elif port_open "$CASESTREAM_SMTP_PORT"; then
        status_line smtp foreign - "$CS_HOST:$CASESTREAM_SMTP_PORT (in use by $(port_owner "$CASESTREAM_SMTP_PORT"))"
    else
        status_line smtp down - "$CS_HOST:$CASESTREAM_SMTP_PORT"
    fi
}

smtp_logs() { echo "$SMTP_LOG"; }
