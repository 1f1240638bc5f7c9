"""The case service: opens and submits regulatory cases, and closes or returns them on the
saga's request.

Layers import in one direction: ``domain`` (pure) <- ``application`` (use cases, ports)
<- ``adapters`` (PostgreSQL, HTTP, Kafka handlers) <- ``bootstrap`` (wiring). Run it with
``python -m services.case``.
"""
