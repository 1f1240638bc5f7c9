"""Codec throughput: encode, decode, encode+decode pairs per second, compiled engine vs fastavro.

Usage: ``.venv/bin/python bench/codec_bench.py [--n 50000] [--repeat 5]``. Prints best-of-N
rates (per CPU second) for a CaseOpened v3 event of ~400 bytes on the wire (in-memory registry; no I/O),
plus the baselines: raw ``fastavro.schemaless_writer/reader`` on the same record, and the
cost of building an ``Envelope`` (its ``__post_init__`` validation included).
"""

from __future__ import annotations

import argparse
import io
import time
import uuid

from fastavro import parse_schema, schemaless_reader, schemaless_writer

from casestream.catalog import load_catalog
from casestream.codec import ENVELOPE_FIELDS, EnvelopeCodec
from casestream.envelope import Envelope, new_event
from casestream.registry import InMemoryRegistry
from casestream.upcasters import default_upcasters


def _event() -> Envelope:
    case_id = str(uuid.uuid4())
    return new_event(
        event_type="CaseOpened", aggregate_type="case", aggregate_id=case_id, aggregate_version=1,
        payload={"title": "Unlicensed waste disposal near the river", "summary": "Reporter saw barrels dumped "
                 "behind the depot on two nights; photos attached.", "severity": 4, "evidence_count": 3,
                 "reporter_email": "reporter@example.org", "priority": "HIGH"},
        tenant_id="tenant-1", source="case", actor_id="officer-17", correlation_id=case_id,
        causation_id=str(uuid.uuid4()), traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    )


def _rate(fn, n: int, repeat: int) -> float:
    """Best-of-``repeat`` rate in calls per CPU second (``time.process_time``: a busy shared box
    slows wall time, not the CPU cost of the code; on an idle box both agree)."""
    best = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        for _ in range(n):
            fn()
        best = min(best, time.process_time() - t)
    return n / best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=50_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    catalog = load_catalog()
    env = _event()
    rows = []
    for engine in ("compiled", "fastavro"):
        codec = EnvelopeCodec(catalog, InMemoryRegistry(), default_upcasters(), engine=engine)
        codec.prepare(auto_register=True)
        value = codec.encode(env)
        rows.append((f"{engine}: encode", _rate(lambda: codec.encode(env), args.n, args.repeat)))
        rows.append((f"{engine}: decode", _rate(lambda: codec.decode(value), args.n, args.repeat)))
        rows.append((f"{engine}: encode+decode pairs", _rate(lambda: codec.decode(codec.encode(env)), args.n, args.repeat)))
    parsed = parse_schema(catalog.schema("CaseOpened"))
    rec = {f: getattr(env, f) for f in ENVELOPE_FIELDS} | {"event_version": 3}

    def raw_pair() -> None:
        buf = io.BytesIO()
        schemaless_writer(buf, parsed, rec)
        buf.seek(0)
        schemaless_reader(buf, parsed, None)

    rows.append(("baseline raw fastavro write+read (dict, no framing)", _rate(raw_pair, args.n, args.repeat)))
    fields = {f: getattr(env, f) for f in ENVELOPE_FIELDS} | {"event_version": 3}
    rows.append(("baseline Envelope(**fields)", _rate(lambda: Envelope(**fields), args.n, args.repeat)))
    print(f"message size: {len(value)} bytes (CaseOpened v3), n={args.n}, best of {args.repeat}")
    for name, r in rows:
        print(f"{name:55} {r:>10,.0f}/s  {1e6 / r:6.2f} us")


if __name__ == "__main__":
    main()
