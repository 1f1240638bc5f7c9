"""Saga-orchestrator use cases: react to events, fire deadlines, resolve, and query sagas.

Ports (``typing.Protocol``) are in :mod:`.ports`; the orchestrator use case in
:mod:`.orchestrator`. Nothing here imports a driver.
"""
