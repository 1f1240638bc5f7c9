"""Audit adapters: projection SQL (parameterised tables), PostgreSQL journal and reader,
consumer handlers, HTTP API."""
