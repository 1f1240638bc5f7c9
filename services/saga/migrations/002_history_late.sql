-- History disposition 'late' (issue 7): a compensable step's success that arrives after the
-- saga began compensating is recorded as late (the compensation already issued undoes it).
ALTER TABLE saga_history DROP CONSTRAINT IF EXISTS saga_history_disposition_check;
ALTER TABLE saga_history ADD CONSTRAINT saga_history_disposition_check
    CHECK (disposition IN ('started', 'transitioned', 'retried', 'ignored', 'late'));
-- stuck-saga scan (GET /sagas/stuck): active sagas by last progress
CREATE INDEX IF NOT EXISTS saga_active_updated_idx ON saga (updated_at) WHERE active;
