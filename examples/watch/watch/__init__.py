"""The watch service: officers watch cases and hear when a watched case is closed or returned.

Consumers on the case service's topic ``outbox.event.case``: ``watch.cases`` keeps the
projection ``watch_cases`` (rebuild: ``casestream replay watch.cases``), ``watch.triggers``
turns a closed or returned watched case into a ``WatchTriggered`` event (outbox, relay,
topic ``outbox.event.watch``). HTTP: ``GET``/``PUT /watch/cases/{id}``.

Layers import in one direction: ``domain`` (pure) <- ``application`` (use cases, ports) <-
``adapters`` (PostgreSQL, projection, consumer handlers, HTTP) <- ``bootstrap`` (wiring).
Run it with ``python -m watch``.
"""

from importlib.resources import files
from pathlib import Path

from casestream.service import ServiceSpec, TopicSpec


def schemas_dir() -> Path:
    """This team's schemas folder (``examples/watch/schemas``, shipped as the resource package
    ``watch.schemas``): catalog.toml, envelope.avsc, watch/WatchTriggered.v<N>.avsc."""
    return Path(str(files("watch.schemas")))


SCHEMAS = schemas_dir()

SERVICE = ServiceSpec(
    name="watch", module="watch", description="watchlists of cases (example service)",
    settings="watch.settings:WatchSettings", build="watch.bootstrap:build",
    consumers=("watch.cases", "watch.triggers"), projections=("watch.cases",), outbox=True,
    # what each consumer reads: the event catalog shows it; the builder checks it at start
    subscriptions={"watch.cases": ("outbox.event.case",), "watch.triggers": ("outbox.event.case",)},
    # the relay's topic for this service's events (aggregate type "watch"); 30 days cover
    # catch-up and dead-letter re-drive, and retention bounds the consumers' inbox rows
    topics=(TopicSpec("outbox.event.watch", partitions=6, retention_ms=30 * 86_400_000),))
