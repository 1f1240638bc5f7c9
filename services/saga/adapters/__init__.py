"""Adapters of the saga-orchestrator: PostgreSQL store, in-memory store, consumer handlers,
deadline scheduler worker, HTTP API."""
