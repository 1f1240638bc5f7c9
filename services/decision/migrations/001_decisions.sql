-- Decisions of the decision service (services/decision): one per case (semantic idempotency).
-- The outbox table comes from casestream.outbox.OUTBOX_MIGRATION, applied before this file.
CREATE TABLE IF NOT EXISTS decision (
    case_id          text        PRIMARY KEY,
    tenant_id        text        NOT NULL,
    saga_id          text        NOT NULL,          -- the saga that asked last (replies go there)
    outcome          text        NOT NULL CHECK (outcome IN ('violation', 'no_violation', 'failed')),
    violation_code   text,
    penalty_cents    bigint      CHECK (penalty_cents IS NULL OR penalty_cents >= 0),
    reason           text,
    rules_version    text        NOT NULL,
    decided_at       timestamptz NOT NULL,
    request_event_id text        NOT NULL,
    version          bigint      NOT NULL CHECK (version >= 1),  -- last reply's aggregate version
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CHECK ((outcome = 'violation') = (violation_code IS NOT NULL AND penalty_cents IS NOT NULL)),
    CHECK ((outcome = 'failed') = (reason IS NOT NULL))
);
