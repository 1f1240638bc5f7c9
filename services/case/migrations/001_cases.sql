-- case service: the case table (state-stored aggregate with an optimistic version) and
-- the idempotency records of write endpoints. The outbox table comes from
-- casestream.outbox.OUTBOX_DDL, applied by the bootstrap before this file.

CREATE TABLE IF NOT EXISTS cases (
    id              uuid        PRIMARY KEY,
    tenant_id       text        NOT NULL,
    status          text        NOT NULL CHECK (status IN ('open', 'submitted', 'closed', 'returned')),
    version         bigint      NOT NULL CHECK (version >= 1),
    title           text        NOT NULL,
    summary         text        NOT NULL CHECK (char_length(summary) <= 500),
    severity        smallint    NOT NULL CHECK (severity BETWEEN 1 AND 5),
    evidence_count  integer     NOT NULL CHECK (evidence_count >= 0),
    reporter_email  text        NOT NULL,
    priority        text        NOT NULL CHECK (priority IN ('LOW', 'NORMAL', 'HIGH')),
    opened_by       text        NOT NULL,
    opened_at       timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    submitted_by    text,
    submitted_at    timestamptz,
    note            text,
    outcome         text        CHECK (outcome IN ('violation', 'no_violation')),
    penalty_cents   bigint      CHECK (penalty_cents >= 0),
    return_reason   text,
    resolved_at     timestamptz
);

CREATE INDEX IF NOT EXISTS cases_tenant_status ON cases (tenant_id, status, updated_at);

-- One row per processed idempotent request. key_hash = sha256(Idempotency-Key): the raw
-- key is never stored. Scope = (tenant_id, client_id, route, key_hash).
CREATE TABLE IF NOT EXISTS idempotency_records (
    tenant_id        text        NOT NULL,
    client_id        text        NOT NULL,
    route            text        NOT NULL,
    key_hash         text        NOT NULL,
    fingerprint      text        NOT NULL,
    response_status  smallint    NOT NULL,
    response_body    jsonb       NOT NULL,
    response_headers jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at       timestamptz NOT NULL,
    expires_at       timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, client_id, route, key_hash)
);

CREATE INDEX IF NOT EXISTS idempotency_records_expiry ON idempotency_records (expires_at);
