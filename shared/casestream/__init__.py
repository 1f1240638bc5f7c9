"""casestream common library: events, outbox + relay, consumer runtime, replay, schema check.

Packages (each ``__init__`` is its public API): ``events`` (envelope, catalog, codec,
registry, upcasting), ``outbox`` (writer, ``outbox.relay``), ``consumer`` (runtime, inbox,
guard, handlers, dead letters), ``kafka``, ``service`` (builder, process, settings),
``http``, ``auth``, ``telemetry``, ``replay``, ``schemacheck``, ``cli``, ``testing``.
Root modules: ``errors`` (exception tree), ``migrations``, ``retry``, ``clock``, ``refs``.
"""

from __future__ import annotations

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    # Lazy: importlib.metadata costs ~60 modules at start-up, and every casestream import
    # (the CLI's included) runs this file first.
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        value = version("casestream")
    except PackageNotFoundError:  # a source tree without an installed distribution
        value = "0+unknown"
    globals()["__version__"] = value
    return value
