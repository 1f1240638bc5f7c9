-- Why the penalty is what it is (PenaltyProposed.reason); null for decisions without a penalty
-- and for violations decided before the reason was stored (announced with an empty reason).
ALTER TABLE decision ADD COLUMN IF NOT EXISTS penalty_reason text;
