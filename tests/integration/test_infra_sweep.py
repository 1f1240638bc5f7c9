"""``deploy/probe.py delete-topics`` against the real broker: deletes the prefixed topics only."""

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from casestream.testing import create_topics, delete_topics

PROBE = Path(__file__).resolve().parents[2] / "deploy" / "probe.py"


def test_delete_topics_removes_the_prefixed_topics_and_keeps_the_rest(kafka_bootstrap):
    run = uuid.uuid4().hex[:8]
    doomed, kept = [f"test.sweep-{run}.a", f"test.sweep-{run}.b"], f"sweepkeep-{run}"
    create_topics(kafka_bootstrap, [*doomed, kept], partitions=2)
    try:
        done = subprocess.run([sys.executable, str(PROBE), "delete-topics", "--bootstrap", kafka_bootstrap,
                               "--prefix", f"test.sweep-{run}."], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert "deleted 2 topics (4 partitions)" in done.stderr
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        deadline = time.monotonic() + 15
        while (left := set(doomed) & set(admin.list_topics(timeout=10).topics)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not left
        assert kept in admin.list_topics(timeout=10).topics
    finally:
        delete_topics(kafka_bootstrap, [kept, *doomed])
