-- audit service: the append-only audit journal (one row per event id, never updated or
-- deleted: enforced by triggers) and the per-case timeline projection. Projection SQL
-- (inserts, reads, shadow tables for replay) lives in services/audit/adapters/projection.py.

CREATE TABLE IF NOT EXISTS audit_journal (
    event_id          uuid        PRIMARY KEY,
    event_type        text        NOT NULL,
    event_version     integer     NOT NULL CHECK (event_version >= 1),
    source            text        NOT NULL,
    tenant_id         text        NOT NULL,
    aggregate_type    text        NOT NULL,
    aggregate_id      text        NOT NULL,
    aggregate_version bigint      NOT NULL CHECK (aggregate_version >= 1),
    occurred_at       timestamptz NOT NULL,
    published_at      timestamptz,
    correlation_id    text        NOT NULL,
    causation_id      text,
    traceparent       text,
    actor_id          text        NOT NULL,
    case_id           text,
    summary           text        NOT NULL,
    payload           jsonb       NOT NULL,
    kafka_topic       text,
    kafka_partition   integer,
    kafka_offset      bigint,
    recorded_at       timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS audit_journal_case ON audit_journal (case_id, occurred_at);
CREATE INDEX IF NOT EXISTS audit_journal_recorded_at ON audit_journal (recorded_at);

CREATE OR REPLACE FUNCTION audit_journal_reject_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit journal is append-only: % on % rejected', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'audit rows are never updated or deleted';
END
$$;

CREATE OR REPLACE TRIGGER audit_journal_append_only
    BEFORE UPDATE OR DELETE ON audit_journal
    FOR EACH ROW EXECUTE FUNCTION audit_journal_reject_change();

CREATE OR REPLACE TRIGGER audit_journal_no_truncate
    BEFORE TRUNCATE ON audit_journal
    FOR EACH STATEMENT EXECUTE FUNCTION audit_journal_reject_change();

-- The case timeline projection: rebuildable from the topics (replay writes a shadow copy
-- created with LIKE ... INCLUDING ALL and swaps it in).
CREATE TABLE IF NOT EXISTS case_timeline (
    event_id          uuid        PRIMARY KEY,
    tenant_id         text        NOT NULL,
    case_id           text        NOT NULL,
    event_type        text        NOT NULL,
    event_version     integer     NOT NULL,
    aggregate_type    text        NOT NULL,
    aggregate_version bigint      NOT NULL,
    occurred_at       timestamptz NOT NULL,
    published_at      timestamptz,
    source            text        NOT NULL,
    summary           text        NOT NULL,
    applied_at        timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS case_timeline_order
    ON case_timeline (tenant_id, case_id, occurred_at, aggregate_version, event_id);
CREATE INDEX IF NOT EXISTS case_timeline_applied_at ON case_timeline (applied_at);
