-- Databases of the casestream suite: one per service (and one for the example service
-- examples/watch), one for integration tests, one for the schema registry (Apicurio SQL
-- storage). Idempotent (psql \gexec), used by deploy/lib/postgres.sh and by
-- docker-compose.yml (/docker-entrypoint-initdb.d).
SELECT format('CREATE DATABASE %I', db)
FROM unnest(ARRAY['case', 'decision', 'notification', 'audit', 'saga', 'casestream_test', 'registry', 'watch']) AS db
WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = db)
\gexec
