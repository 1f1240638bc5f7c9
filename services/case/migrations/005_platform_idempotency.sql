-- Idempotency-Key records moved to the platform's table idempotency_keys (created with the
-- outbox DDL, before this migration). A key recorded here before the move is not replayed
-- after it: the old rows are dropped with their table.
DROP TABLE IF EXISTS idempotency_records;
