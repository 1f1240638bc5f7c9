-- Who watches which case. The case projection (watch_cases) is created by the projection
-- itself (watch.adapters.projection.create_tables), so that a replay's shadow table gets the
-- same DDL.
CREATE TABLE watches (
    tenant_id   text        NOT NULL,
    case_id     text        NOT NULL,
    watcher_id  text        NOT NULL,
    version     bigint      NOT NULL DEFAULT 0 CHECK (version >= 0),
    created_at  timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, case_id, watcher_id)
);
