-- case service: the regulator's workflow. New statuses (awaiting_evidence, under_review,
-- withdrawn, appealed), the assigned officer, the open evidence request, review, withdrawal
-- and appeal; evidence items with their content (bytea, size-limited; the service checks
-- the same limit, services.case.domain.workflow.EVIDENCE_MAX_BYTES); the search index
-- (keyset order opened_at, id).

ALTER TABLE cases DROP CONSTRAINT IF EXISTS cases_status_check;
ALTER TABLE cases ADD CONSTRAINT cases_status_check CHECK (status IN (
    'open', 'awaiting_evidence', 'under_review', 'submitted', 'closed', 'returned',
    'withdrawn', 'appealed'));

ALTER TABLE cases ADD COLUMN IF NOT EXISTS officer_id text;
ALTER TABLE cases ADD COLUMN IF NOT EXISTS evidence_status text NOT NULL DEFAULT 'none'
    CHECK (evidence_status IN ('none', 'requested', 'submitted'));
ALTER TABLE cases ADD COLUMN IF NOT EXISTS evidence_request_id uuid;
ALTER TABLE cases ADD COLUMN IF NOT EXISTS evidence_description text;
ALTER TABLE cases ADD COLUMN IF NOT EXISTS evidence_due_at timestamptz;
ALTER TABLE cases ADD COLUMN IF NOT EXISTS review_started_at timestamptz;
ALTER TABLE cases ADD COLUMN IF NOT EXISTS withdraw_reason text;
ALTER TABLE cases ADD COLUMN IF NOT EXISTS appeal_reason text;
ALTER TABLE cases ADD COLUMN IF NOT EXISTS appealed_at timestamptz;

CREATE INDEX IF NOT EXISTS cases_tenant_opened ON cases (tenant_id, opened_at, id);

CREATE TABLE IF NOT EXISTS case_evidence (
    id            uuid        PRIMARY KEY,
    case_id       uuid        NOT NULL REFERENCES cases (id),
    tenant_id     text        NOT NULL,
    request_id    uuid,
    name          text        NOT NULL,
    media_type    text        NOT NULL,
    size_bytes    integer     NOT NULL CHECK (size_bytes BETWEEN 1 AND 32768),
    sha256        text        NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    content       bytea       NOT NULL CHECK (octet_length(content) = size_bytes),
    submitted_by  text        NOT NULL,
    submitted_at  timestamptz NOT NULL
);

CREATE INDEX IF NOT EXISTS case_evidence_case ON case_evidence (tenant_id, case_id, submitted_at);
