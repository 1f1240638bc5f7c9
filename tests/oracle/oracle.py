"""Apache Avro's Java ``SchemaCompatibility`` as a test oracle, and fastavro as the decoder.

:func:`java_classpath` fetches the ``org.apache.avro:avro`` jar and its dependencies from
Maven Central (``mvn dependency:build-classpath`` on tests/oracle/pom.xml, into ~/.m2) and
compiles tests/oracle/AvroCompat.java with ``javac``; both land in ``.local/avro-oracle/``
and are redone only when the pom or the Java source change. :func:`java_verdicts` runs every
(reader, writer) check in one JVM. :func:`decode` writes a generated datum with the writer
schema and reads it with the reader schema (fastavro's schema resolution).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import fastavro

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
WORK = Path(os.environ.get("CASESTREAM_AVRO_ORACLE_DIR", REPO / ".local" / "avro-oracle"))


class OracleUnavailable(RuntimeError):
    """java, javac or mvn is missing, or Maven could not fetch the avro jar (message says which)."""


def _run(args: Sequence[str | Path], timeout: float) -> None:
    try:
        done = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError as e:
        raise OracleUnavailable(f"{args[0]} is not installed (needed by the Avro Java oracle)") from e
    if done.returncode != 0:
        raise OracleUnavailable(f"{' '.join(map(str, args))} failed: {(done.stdout + done.stderr)[-2000:]}")


def java_classpath() -> str:
    """``classes:<jars>`` of the compiled oracle (fetching and compiling once per content)."""
    pom, source = HERE / "pom.xml", HERE / "AvroCompat.java"
    stamp = hashlib.sha256(pom.read_bytes() + source.read_bytes()).hexdigest()[:16]
    out = WORK / stamp
    cp_file, classes = out / "classpath.txt", out / "classes"
    if not (classes / "AvroCompat.class").is_file() or not cp_file.is_file():
        if out.exists():
            shutil.rmtree(out)
        classes.mkdir(parents=True)
        _run(["mvn", "-q", "-B", "-f", pom, "dependency:build-classpath", f"-Dmdep.outputFile={cp_file}"], 600)
        _run(["javac", "-nowarn", "-d", classes, "-cp", cp_file.read_text().strip(), source], 300)
    return f"{classes}{os.pathsep}{cp_file.read_text().strip()}"


def java_verdicts(checks: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """Run ``{"id", "refs", "reader", "writer"}`` checks through Java; id -> ``{"verdict", "detail"}``."""
    lines = "".join(json.dumps(c) + "\n" for c in checks)
    done = subprocess.run(["java", "-cp", java_classpath(), "AvroCompat"], input=lines, capture_output=True,
                          text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise OracleUnavailable(f"AvroCompat failed: {done.stderr[-2000:]}")
    out = {}
    for line in done.stdout.splitlines():
        answer = json.loads(line)
        out[answer["id"]] = answer
    return out


def _parsed(schema: Any, refs: Sequence[Any]) -> tuple[Any, dict[str, Any]]:
    named: dict[str, Any] = {}
    for ref in refs:
        fastavro.parse_schema(json.loads(json.dumps(ref)), named_schemas=named)
    return fastavro.parse_schema(json.loads(json.dumps(schema)), named_schemas=named), named


_PRIMITIVE_SAMPLES = {"null": None, "boolean": True, "int": 7, "long": 7, "float": 1.5, "double": 1.5,
                      "bytes": b"\x01\xff", "string": "s"}


def sample(schema: Any, named: dict[str, Any], depth: int = 0) -> Any:
    """A datum of the (fastavro-parsed) ``schema`` that exercises what evolution changes: the
    last enum symbol and the last union branch (new ones are appended), one array item and map
    entry; below depth 3 unions take ``null`` and arrays are empty (recursive types end)."""
    if isinstance(schema, str):
        if schema in _PRIMITIVE_SAMPLES:
            return _PRIMITIVE_SAMPLES[schema]
        return sample(named[schema], named, depth)
    if isinstance(schema, list):
        branches = schema
        if depth >= 3 and "null" in branches:
            return None
        return sample(branches[-1], named, depth + 1)
    t = schema["type"]
    logical = schema.get("logicalType")
    if logical == "decimal":
        from decimal import Decimal

        return Decimal(7).scaleb(-int(schema.get("scale", 0)))
    if logical == "uuid":
        return "00000000-0000-4000-8000-000000000007"
    if t in ("record", "error"):
        named.setdefault(schema["name"], schema)
        return {fl["name"]: sample(fl["type"], named, depth + 1) for fl in schema["fields"]}
    if t == "enum":
        named.setdefault(schema["name"], schema)
        return schema["symbols"][-1]
    if t == "fixed":
        named.setdefault(schema["name"], schema)
        return bytes(range(schema["size"]))
    if t == "array":
        return [] if depth >= 3 else [sample(schema["items"], named, depth + 1)]
    if t == "map":
        return {} if depth >= 3 else {"k": sample(schema["values"], named, depth + 1)}
    return sample(t, named, depth)


def decode(reader: Any, writer: Any, refs: Sequence[Any] = ()) -> str:
    """``"ok"``, or why a datum generated from ``writer`` cannot be read with ``reader``."""
    try:
        w, named = _parsed(writer, refs)
        r, _ = _parsed(reader, refs)
    except Exception as e:  # noqa: BLE001 - fastavro rejects the schema itself
        return f"schema: {type(e).__name__}: {e}"
    datum = sample(w, dict(named))
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, w, datum)
    buf.seek(0)
    try:
        fastavro.schemaless_reader(buf, w, r)
    except Exception as e:  # noqa: BLE001 - every resolution failure counts
        return f"{type(e).__name__}: {e}"
    return "ok"
