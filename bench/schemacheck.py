"""Schema gate on a generated repository beside Apache avro's own checker in a plain loop.

Usage: ``.venv/bin/python bench/schemacheck.py [--subjects 1000] [--versions 10] [--repeat 3]``.
Generates a repository of ``--subjects`` subjects x ``--versions`` versions (each version adds
an optional field to a record with a nested record, an enum, an array and a union; every
subject compatible) in a temporary folder, with a ``casestream-schemas.toml`` naming the folder
(RecordNameStrategy) under BACKWARD_TRANSITIVE, then times (CPU seconds of this process, so other load on the machine does not count), best of ``--repeat``, in the same run:

* gate: ``check_repository`` end to end (read and parse the configuration and files, the
  single-schema rules, fastavro and avro parsing, every pair, the stricter rules);
* baseline: the same pairs through ``avro.compatibility.ReaderWriterCompatibilityChecker``
  in a plain loop, after ``avro.schema.parse`` of each file's text (already in memory).

Prints pairs/s of each and the ratio gate / baseline (target: at most 1.5).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import avro.schema
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

from casestream.schemacheck.compat import pairs_for_level
from casestream.schemacheck.runner import check_repository

LEVEL = "BACKWARD_TRANSITIVE"


def version(subject: int, n: int) -> dict:
    fields = [
        {"name": "id", "type": "string"},
        {"name": "amount", "type": "long"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "DONE"], "default": "NEW"}},
        {"name": "lines", "type": {"type": "array", "items": {
            "type": "record", "name": "Line", "fields": [{"name": "sku", "type": "string"},
                                                         {"name": "qty", "type": "int"}]}}},
        {"name": "note", "type": ["null", "string"], "default": None},
    ]
    fields += [{"name": f"extra{i}", "type": ["null", "long"], "default": None} for i in range(2, n + 1)]
    return {"type": "record", "name": f"Event{subject}", "namespace": "bench.events", "fields": fields}


def generate(root: Path, subjects: int, versions: int) -> list[list[str]]:
    (root / "avro").mkdir(parents=True)
    (root / "casestream-schemas.toml").write_text(
        f'compatibility = "{LEVEL}"\n\n[[folders]]\npath = "avro"\npattern = "{{name}}.v{{version}}.avsc"\n')
    texts = []
    for s in range(subjects):
        history = []
        for n in range(1, versions + 1):
            text = json.dumps(version(s, n), indent=2)
            (root / "avro" / f"Event{s}.v{n}.avsc").write_text(text)
            history.append(text)
        texts.append(history)
    return texts


def baseline(texts: list[list[str]]) -> int:
    pairs = 0
    for history in texts:
        parsed = [avro.schema.parse(t) for t in history]
        for new in range(1, len(parsed)):
            for pair in pairs_for_level(LEVEL, new):
                verdict = ReaderWriterCompatibilityChecker().get_compatibility(parsed[pair.reader], parsed[pair.writer])
                assert verdict.compatibility is SchemaCompatibilityType.compatible
                pairs += 1
    return pairs


def gate(root: Path) -> int:
    report = check_repository(root / "casestream-schemas.toml")
    assert report.exit_code == 0, report.findings[:3]
    return report.pairs


def best(fn, repeat: int) -> tuple[float, int]:  # noqa: ANN001
    times, n = [], 0
    for _ in range(repeat):
        t0 = time.process_time()
        n = fn()
        times.append(time.process_time() - t0)
    return min(times), n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subjects", type=int, default=1000)
    parser.add_argument("--versions", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        texts = generate(root, args.subjects, args.versions)
        rounds: dict[str, list[float]] = {"gate": [], "baseline": []}
        pairs = {}
        for _ in range(args.repeat):  # alternating rounds: both see the same machine load
            for name, fn in (("baseline", lambda: baseline(texts)), ("gate", lambda: gate(root))):
                t, n = best(fn, 1)
                rounds[name].append(t)
                pairs[name] = n
    g, b = min(rounds["gate"]), min(rounds["baseline"])
    assert pairs["gate"] == pairs["baseline"], pairs
    print(f"repository: {args.subjects} subjects x {args.versions} versions, {LEVEL}, {pairs['gate']} pairs")
    print(f"baseline (avro ReaderWriterCompatibilityChecker loop): {b:8.2f} s  {pairs['baseline'] / b:10.0f} pairs/s")
    print(f"gate (casestream schemas check, end to end):          {g:8.2f} s  {pairs['gate'] / g:10.0f} pairs/s")
    print(f"ratio gate / baseline: {g / b:.2f} (target <= 1.5); best of {args.repeat} alternating rounds")


if __name__ == "__main__":
    main()
