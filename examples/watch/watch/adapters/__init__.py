"""Adapters of the watch service: PostgreSQL (``postgres``), the case projection
(``projection``), the trigger consumer (``triggers``), HTTP (``http``) and in-memory
doubles for tests (``memory``)."""
