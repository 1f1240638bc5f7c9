"""Processing mode of a consumer: LIVE (normal service operation) or REPLAY.

Replay applies handlers in ``REPLAY`` mode: projection updates yes;
notices, e-mails and outgoing commands no. The consumer runtime uses :meth:`ProcessingMode.runs`
to pick which registered handlers run; handlers may also branch on ``ctx.mode`` themselves.
"""

from __future__ import annotations

import enum


class ProcessingMode(enum.Enum):
    """How events are being applied.

    LIVE: the normal service loop; every handler kind runs.
    REPLAY: rebuilding read models from history; only ``PROJECTION`` handlers run and follow-up
    events appended to ``ctx.outbox`` are discarded.
    """

    LIVE = "live"
    REPLAY = "replay"
