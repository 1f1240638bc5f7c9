-- One notice per case and kind: the violation notice ('notice'), a correction notice
-- ('correction') and the appeal-rejection mail ('appeal_rejection'); a correction is a new
-- row, the notice it corrects stays as it was. `reason`: why a correction was made / an
-- appeal rejected (NULL for a violation notice).
ALTER TABLE notice ADD COLUMN IF NOT EXISTS kind text NOT NULL DEFAULT 'notice'
    CHECK (kind IN ('notice', 'correction', 'appeal_rejection'));
ALTER TABLE notice ADD COLUMN IF NOT EXISTS reason text;
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'notice_case_kind_pk') THEN
        ALTER TABLE notice DROP CONSTRAINT IF EXISTS notice_pkey;
        ALTER TABLE notice ADD CONSTRAINT notice_case_kind_pk PRIMARY KEY (case_id, kind);
    END IF;
END $$;
