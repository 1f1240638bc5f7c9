"""The official AsyncAPI 3.0.0 JSON schema, from the npm package ``@asyncapi/specs`` (the
AsyncAPI Initiative's own), fetched once with ``npm pack`` into ``.local/asyncapi-specs/``."""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

from tests.support.locks import file_lock

ROOT = Path(__file__).resolve().parents[2]
#: pinned: the package's schema files change between releases
SPECS_VERSION = "6.11.1"
CACHE = ROOT / ".local" / "asyncapi-specs" / SPECS_VERSION
#: the bundled 3.0.0 schema with local ``#/definitions`` references (no remote ``$id`` lookups)
MEMBER = "package/schemas/3.0.0-without-$id.json"


def asyncapi_3_schema() -> dict[str, Any]:
    """The AsyncAPI 3.0.0 JSON schema (draft-07), downloading the package on first use.

    Raises:
        RuntimeError: npm is missing or the package cannot be fetched (one line, the command's
            error output).
    """
    target = CACHE / "3.0.0.json"
    with file_lock(CACHE.with_name(CACHE.name + ".lock")):  # one npm pack among the workers
        return _fetched(target)


def _fetched(target: Path) -> dict[str, Any]:
    if not target.is_file():
        npm = shutil.which("npm")
        if npm is None:
            raise RuntimeError("npm is not installed: it fetches @asyncapi/specs (the AsyncAPI JSON schema)")
        CACHE.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([npm, "pack", f"@asyncapi/specs@{SPECS_VERSION}", "--silent"], cwd=CACHE,
                              capture_output=True, text=True, timeout=300, check=False)
        tgz = CACHE / f"asyncapi-specs-{SPECS_VERSION}.tgz"
        if done.returncode != 0 or not tgz.is_file():
            raise RuntimeError(f"npm pack @asyncapi/specs@{SPECS_VERSION}: {done.stderr.strip()[-500:]}")
        with tarfile.open(tgz) as tar:
            member = tar.extractfile(MEMBER)
            assert member is not None, MEMBER
            tmp = target.with_suffix(".tmp")
            tmp.write_bytes(member.read())
            tmp.replace(target)
        tgz.unlink()
    return json.loads(target.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def asyncapi_errors(document: Any) -> list[str]:
    """Every violation of the AsyncAPI 3.0.0 schema in ``document``: ``path: message``."""
    import jsonschema_rs

    validator = jsonschema_rs.Draft7Validator(asyncapi_3_schema())
    return [f"/{'/'.join(map(str, e.instance_path))}: {e.message[:300]}" for e in validator.iter_errors(document)]
