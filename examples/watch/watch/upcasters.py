"""The watch service's upcasters (pure): every step from an old event version to the next.

``WatchTriggered``:
  * v1 -> v2: adds ``final``, derived from ``trigger`` (a closed case is final, a returned
    one is not; ``watch.domain.is_final``) rather than the schema default ``false``.

``schemas/catalog.toml`` names :func:`chain` (``[catalog] upcasters = "watch.upcasters:chain"``);
the codec verifies it against the catalog at start-up.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from casestream.events import UpcasterChain
from watch.domain import is_final


def watch_triggered_v1_v2(payload: Mapping[str, Any]) -> dict[str, Any]:
    """WatchTriggered v1 -> v2: ``final`` = the trigger closed the case."""
    return {**payload, "final": is_final(payload["trigger"])}


def chain() -> UpcasterChain:
    """A new chain holding every watch upcaster."""
    upcasters = UpcasterChain()
    upcasters.add("WatchTriggered", 1, watch_triggered_v1_v2)
    return upcasters
