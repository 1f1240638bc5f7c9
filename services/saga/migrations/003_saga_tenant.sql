-- Tenant-scoped reads of the saga API (issue 8): every HTTP query filters on the saga's
-- tenant (the CaseSubmitted envelope's tenant_id, stored since 001) before its LIMIT.
CREATE INDEX IF NOT EXISTS saga_tenant_created_idx ON saga (tenant_id, created_at DESC);
CREATE INDEX IF NOT EXISTS saga_tenant_state_idx ON saga (tenant_id, state, created_at DESC);
