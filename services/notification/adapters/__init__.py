"""Adapters of the notification service: PostgreSQL, SMTP, in-memory, consumer handler,
sender worker, HTTP."""
