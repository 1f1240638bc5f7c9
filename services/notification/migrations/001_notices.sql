-- Notices of the notification service (services/notification): one per case.
-- The outbox table comes from casestream.outbox.OUTBOX_MIGRATION, applied before this file.
CREATE TABLE IF NOT EXISTS notice (
    case_id          text        PRIMARY KEY,
    saga_id          text        NOT NULL,        -- the saga to answer
    tenant_id        text        NOT NULL,
    correlation_id   text        NOT NULL,
    request_event_id text        NOT NULL,        -- causation of the reply
    traceparent      text,
    recipient_email  text        NOT NULL,
    penalty_cents    bigint      NOT NULL CHECK (penalty_cents >= 0),
    violation_code   text        NOT NULL,
    message_id       text        NOT NULL UNIQUE, -- deterministic Message-ID of the mail
    status           text        NOT NULL CHECK (status IN ('pending', 'sent', 'failed')),
    attempts         integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at  timestamptz NOT NULL,
    last_error       text,
    version          bigint      NOT NULL DEFAULT 0 CHECK (version >= 0), -- last reply's aggregate version
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    sent_at          timestamptz
);
-- the sender's claim scan: only pending notices
CREATE INDEX IF NOT EXISTS notice_pending_idx ON notice (next_attempt_at) WHERE status = 'pending';
