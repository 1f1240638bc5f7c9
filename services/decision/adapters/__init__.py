"""Adapters of the decision service: PostgreSQL store, in-memory store, consumer handler, HTTP."""
