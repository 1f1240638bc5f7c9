"""The consumer loop's fetch returns what has arrived instead of waiting for a full batch."""

from __future__ import annotations

import pytest

from casestream.consumer.runtime import fetch_batch


class BatchWaitingConsumer:
    """``consume(n, timeout)`` as librdkafka's: with fewer than n records ready it waits the
    whole timeout (recorded in ``waited_s``), then returns what there is."""

    def __init__(self, ready: list[str], arriving: list[str] = ()) -> None:
        self.ready = list(ready)
        self.arriving = list(arriving)  # arrive during the first wait
        self.waited_s = 0.0

    def consume(self, n: int, timeout: float) -> list[str]:
        if len(self.ready) < n and timeout > 0:
            self.ready.extend(self.arriving)
            self.arriving = []
            if len(self.ready) < n:
                self.waited_s += timeout
        out, self.ready = self.ready[:n], self.ready[n:]
        return out


def test_records_already_fetched_return_at_once():
    c = BatchWaitingConsumer(["a", "b", "c"])
    assert fetch_batch(c, 200, 0.5) == ["a", "b", "c"]
    assert c.waited_s == 0.0


def test_an_idle_consumer_returns_with_the_first_record_and_what_came_with_it():
    c = BatchWaitingConsumer([], arriving=["a", "b"])
    assert fetch_batch(c, 200, 0.5) == ["a", "b"]
    assert c.waited_s == 0.0


def test_nothing_arriving_waits_the_poll_timeout_once():
    c = BatchWaitingConsumer([])
    assert fetch_batch(c, 200, 0.5) == []
    assert c.waited_s == 0.5


def test_batch_size_is_the_bound():
    c = BatchWaitingConsumer([str(i) for i in range(10)])
    assert fetch_batch(c, 4, 0.5) == ["0", "1", "2", "3"]
    assert fetch_batch(c, 4, 0.0) == ["4", "5", "6", "7"]
