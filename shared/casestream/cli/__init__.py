"""The ``casestream`` command line (console script ``casestream = casestream.cli:main``).

Modules: ``main`` (the group; sub-command groups are imported lazily, see there), and one
module per group: ``schemas``, ``outbox``, ``dlq``, ``replay``, ``token``, ``status``.
This package imports only ``main`` (click): ``casestream schemas check`` in a team's CI
loads no Kafka or PostgreSQL driver.
"""

from casestream.cli.main import ConfigurationError, main

__all__ = ["ConfigurationError", "main"]
