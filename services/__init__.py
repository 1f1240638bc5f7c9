"""casestream services: case, decision, audit, notification and saga (orchestrator).

Suite-wide content lives here, not in the library: :func:`schemas_dir` (the suite's event
catalog, shipped as the resource package ``services.schemas``) and :mod:`services.upcasters`
(the catalog's upcaster chain, named by ``[catalog] upcasters`` in ``schemas/catalog.toml``).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["schemas_dir"]


def schemas_dir() -> Path:
    """The suite's schemas folder: the resource package ``services.schemas`` (the top-level
    ``schemas/`` folder, shipped in the wheel; the checkout's folder in editable installs)."""
    from importlib.resources import files

    return Path(str(files("services.schemas")))
