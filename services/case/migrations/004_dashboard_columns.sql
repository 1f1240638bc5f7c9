-- case service: the case.dashboard projection's per-case columns (officer, evidence status,
-- penalty, appeal state) on a case_dashboard table created before them, and status nullable
-- (an event that sets no status keeps the stored one). A database without the table, or with
-- the current one (created by case.dashboard's create_tables), is left alone: ALTER TABLE
-- takes an ACCESS EXCLUSIVE lock even when it changes nothing, so it is issued only for what
-- is missing. The added columns stay empty until `casestream replay case.dashboard` fills them.

DO $$
DECLARE
    wanted CONSTANT text[][] := ARRAY[['officer_id', 'text'], ['evidence_status', 'text'],
                                      ['penalty_cents', 'bigint'], ['appeal_state', 'text']];
    i int;
BEGIN
    IF to_regclass('case_dashboard') IS NULL THEN
        RETURN;
    END IF;
    FOR i IN 1 .. array_length(wanted, 1) LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'case_dashboard'::regclass
                       AND attname = wanted[i][1] AND attnum > 0 AND NOT attisdropped) THEN
            EXECUTE format('ALTER TABLE case_dashboard ADD COLUMN %I %s', wanted[i][1], wanted[i][2]);
        END IF;
    END LOOP;
    IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'case_dashboard'::regclass
               AND attname = 'status' AND attnotnull) THEN
        ALTER TABLE case_dashboard ALTER COLUMN status DROP NOT NULL;
    END IF;
END
$$;
