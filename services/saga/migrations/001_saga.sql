-- Saga instances of the saga-orchestrator (services/saga). The outbox table comes from
-- casestream.outbox.OUTBOX_MIGRATION, applied before this file; the inbox/guard tables are
-- created by the consumer runtime (casestream.inbox.ensure_schema).
CREATE TABLE IF NOT EXISTS saga (
    saga_id        uuid        PRIMARY KEY,
    definition     text        NOT NULL,
    case_id        text        NOT NULL,
    tenant_id      text        NOT NULL,
    correlation_id text        NOT NULL,
    state          text        NOT NULL,
    step           text,
    attempts       integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    deadline_at    timestamptz,
    data           jsonb       NOT NULL DEFAULT '{}'::jsonb,
    version        integer     NOT NULL CHECK (version >= 1),   -- optimistic concurrency
    event_seq      bigint      NOT NULL DEFAULT 0,                -- last saga event's aggregate version
    active         boolean     NOT NULL,                          -- not in a TERMINAL state
    started_by     text        NOT NULL UNIQUE,                   -- the start event's id
    last_event_id  text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now()
);
-- at most one active saga per case
CREATE UNIQUE INDEX IF NOT EXISTS saga_active_case_uq ON saga (case_id) WHERE active;
CREATE INDEX IF NOT EXISTS saga_case_idx ON saga (case_id, created_at DESC);
CREATE INDEX IF NOT EXISTS saga_state_idx ON saga (state, created_at DESC);
-- the deadline scheduler's scan: only sagas waiting on a deadline
CREATE INDEX IF NOT EXISTS saga_deadline_idx ON saga (deadline_at) WHERE deadline_at IS NOT NULL;

-- What every trigger did to a saga (GET /sagas/{id}); ignored/late replies are recorded too.
CREATE TABLE IF NOT EXISTS saga_history (
    seq         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    saga_id     uuid        NOT NULL REFERENCES saga (saga_id),
    at          timestamptz NOT NULL,
    trigger     text        NOT NULL,
    event_id    text,
    from_state  text,
    to_state    text        NOT NULL,
    disposition text        NOT NULL CHECK (disposition IN ('started', 'transitioned', 'retried', 'ignored')),
    note        text        NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS saga_history_saga_idx ON saga_history (saga_id, seq);
-- one history entry per (saga, event): a replayed reply is recognised as a duplicate
CREATE UNIQUE INDEX IF NOT EXISTS saga_history_event_uq ON saga_history (saga_id, event_id)
    WHERE event_id IS NOT NULL;
