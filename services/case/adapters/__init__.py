"""Case adapters: PostgreSQL (repository, idempotency, unit of work), HTTP API, saga-request
handlers, and in-memory doubles of the ports for tests."""
