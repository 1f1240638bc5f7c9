-- Evidence reminders ('evidence_reminder'): one per case and evidence request, so a notice's
-- identity is (case_id, kind, evidence_request_id); evidence_request_id is '' for the other
-- kinds (one per case and kind, as before).
ALTER TABLE notice ADD COLUMN IF NOT EXISTS evidence_request_id text NOT NULL DEFAULT '';
ALTER TABLE notice DROP CONSTRAINT IF EXISTS notice_kind_check;
ALTER TABLE notice ADD CONSTRAINT notice_kind_check
    CHECK (kind IN ('notice', 'correction', 'appeal_rejection', 'evidence_reminder'));
ALTER TABLE notice DROP CONSTRAINT IF EXISTS notice_case_kind_pk;
ALTER TABLE notice DROP CONSTRAINT IF EXISTS notice_case_kind_request_pk;
ALTER TABLE notice ADD CONSTRAINT notice_case_kind_request_pk
    PRIMARY KEY (case_id, kind, evidence_request_id);
