"""casestream services: case, decision, audit, notification and saga (orchestrator).

The suite's event contracts are not here: the schemas folder and the upcasters are the
distribution ``casestream-suite-schemas`` (package ``casestream_suite_schemas``), which this
one depends on. :func:`schemas_dir` is that package's function, re-exported for the suite's
own bootstraps and tests.
"""

from __future__ import annotations

from casestream_suite_schemas import schemas_dir

__all__ = ["schemas_dir"]
