-- Databases of the casestream suite: one per service, one for integration tests, one for
-- the schema registry (Apicurio SQL storage). Other installed services' databases are
-- created by the dev stack (casestream.service.ServiceStack) when it starts them. Idempotent (psql \gexec), used by deploy/lib/postgres.sh and by
-- docker-compose.yml (/docker-entrypoint-initdb.d).
SELECT format('CREATE DATABASE %I', db)
FROM unnest(ARRAY['case', 'decision', 'notification', 'audit', 'saga', 'casestream_test', 'registry']) AS db
WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = db)
\gexec
