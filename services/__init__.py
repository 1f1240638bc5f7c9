"""casestream services: case, decision, audit, notification and saga (orchestrator)."""
