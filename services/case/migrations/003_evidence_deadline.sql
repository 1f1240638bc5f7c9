-- case service: overdue evidence. The reminder (evidence_status 'overdue', escalation time)
-- and the escalation to manual review; the scan index of the deadline worker.

ALTER TABLE cases DROP CONSTRAINT IF EXISTS cases_status_check;
ALTER TABLE cases ADD CONSTRAINT cases_status_check CHECK (status IN (
    'open', 'awaiting_evidence', 'under_review', 'submitted', 'closed', 'returned',
    'withdrawn', 'appealed', 'manual_review'));

ALTER TABLE cases DROP CONSTRAINT IF EXISTS cases_evidence_status_check;
ALTER TABLE cases ADD CONSTRAINT cases_evidence_status_check CHECK (evidence_status IN (
    'none', 'requested', 'overdue', 'submitted'));

ALTER TABLE cases ADD COLUMN IF NOT EXISTS evidence_escalate_at timestamptz;

CREATE INDEX IF NOT EXISTS cases_evidence_deadline ON cases (evidence_due_at)
    WHERE status = 'awaiting_evidence';
