"""The regulator suite's event contracts: its schemas folder and its upcasters.

Distribution ``casestream-suite-schemas`` (``schemas/pyproject.toml``): this folder is the
package ``casestream_suite_schemas``, shipping ``catalog.toml`` and the ``.avsc`` files as
package data and :mod:`casestream_suite_schemas.upcasters` (the chain ``[catalog] upcasters``
names). It registers :func:`schemas_dir` as the ``casestream.schemas`` entry point ``suite``,
so a consumer of the suite's events installs this package alone (never the suite's services)
and finds the folder with ``casestream.service.schema_folder("suite")``.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["schemas_dir"]


def schemas_dir() -> Path:
    """The folder holding the suite's ``catalog.toml`` (this package's folder: the checkout's
    ``schemas/`` in an editable install, the installed copy from a wheel)."""
    from importlib.resources import files

    return Path(str(files(__name__)))
