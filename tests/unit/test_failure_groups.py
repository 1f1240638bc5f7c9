"""Dead letters grouped by failure fingerprint, their classes and the re-drive warning (pure)."""

from __future__ import annotations

import pytest

from casestream.consumer import Record
from casestream.operations import (
    NON_RETRYABLE,
    dead_letter_state,
    failure_class,
    failure_groups,
    find_failure_group,
    normalise_message,
    retry_warning,
)


def dl(offset: int, reason: str, message: str, *, error_class: str = "casestream.errors.PoisonMessageError",
       event_type: str = "CaseOpened", first: str = "2026-01-01T00:00:00.000Z",
       last: str = "2026-01-01T00:00:01.000Z", reference: bool = False) -> Record:
    headers = [("id", f"e{offset}".encode()), ("type", event_type.encode()),
               ("dlq.original.topic", b"t"), ("dlq.original.partition", b"0"),
               ("dlq.original.offset", str(offset).encode()), ("dlq.error.reason", reason.encode()),
               ("dlq.error.class", error_class.encode()), ("dlq.error.message", message.encode()),
               ("dlq.first.failure", first.encode()), ("dlq.last.failure", last.encode())]
    if reference:
        headers.append(("dlq.reference", b"true"))
    return Record(topic="c.dlq", partition=0, offset=offset, key=b"k", value=None if reference else b"v",
                  timestamp_ms=offset + 1, headers=tuple(headers))


def classes(*records: Record) -> list[str]:
    return [failure_class(e) for e in dead_letter_state("c", list(records), [], {}).entries]


def test_every_provokable_failure_is_labelled_as_what_it_is() -> None:
    assert classes(
        dl(0, "bad_magic_byte", "magic byte is 0x7b"), dl(1, "avro_decode", "schema id 7: Avro decode failed"),
        dl(2, "unknown_schema_id", "schema id 999 is not in the registry"),
        dl(3, "schema_resolution", "schema id 8 (CaseOpened v2): does not resolve"),
        dl(4, "version_gap", "aggregate c-1 waits for version 3"),
        dl(5, "retries_exhausted", "boom", error_class="builtins.RuntimeError"),
        dl(6, "retries_exhausted", "took too long", error_class="builtins.TimeoutError"),
        dl(7, "retries_exhausted:QueryCanceled", "canceling statement due to statement timeout",
           error_class="psycopg.errors.QueryCanceled"),
        dl(8, "avro_decode", "x", reference=True), dl(9, "validation", "bad payload"),
        dl(10, "poison", "the handler refused it"), dl(11, "something_new", "?"),
    ) == ["corrupt_bytes", "corrupt_bytes", "unknown_schema_id", "schema_resolution", "guard_gap",
          "handler_error", "timeout", "timeout", "oversize", "invalid_event", "handler_rejected", "other"]


def test_the_message_is_normalised_so_ids_and_values_do_not_split_a_group() -> None:
    a = normalise_message("case 3f2c1a9e-0b7d-4c1e-9a55-6d0f1b2c3d4e: key (email)=('a@b.c') at offset 4411")
    b = normalise_message("case 0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d: key (email)=('x@y.z') at offset 17")
    assert a == b == "case <uuid>: key (email)=(<value>) at offset <n>"
    assert normalise_message("schema id 00ab34ef99 (CaseOpened v2)") == "schema id <hex> (CaseOpened v2)"


def test_open_dead_letters_of_one_cause_form_one_group_with_count_times_and_sample() -> None:
    state = dead_letter_state("c", [
        dl(0, "retries_exhausted", "deadlock on case 11", error_class="builtins.RuntimeError",
           first="2026-01-01T00:00:00.000Z", last="2026-01-01T00:00:05.000Z"),
        dl(1, "avro_decode", "schema id 7 (CaseOpened): Avro decode failed"),
        dl(2, "retries_exhausted", "deadlock on case 12", error_class="builtins.RuntimeError",
           first="2026-01-01T00:01:00.000Z", last="2026-01-01T00:02:00.000Z"),
        dl(3, "retries_exhausted", "deadlock on case 13", error_class="builtins.RuntimeError",
           event_type="CaseClosed"),
        dl(4, "retries_exhausted", "deadlock on case 14", error_class="builtins.RuntimeError"),
    ], [], {}, {"0:4"})  # the last one was discarded: not open
    groups = failure_groups(state)
    assert [(g.count, g.failure_class, g.event_type) for g in groups] == [
        (2, "handler_error", "CaseOpened"), (1, "corrupt_bytes", "CaseOpened"),
        (1, "handler_error", "CaseClosed")]
    big = groups[0]
    assert [e.label for e in big.entries] == ["0:0", "0:2"] and big.sample.label == "0:2"
    assert (big.first_seen, big.last_seen) == ("2026-01-01T00:00:00.000Z", "2026-01-01T00:02:00.000Z")
    assert big.retryable and not groups[1].retryable
    assert big.message == "deadlock on case <n>"
    assert len({g.fingerprint for g in groups}) == 3
    assert find_failure_group(state, big.fingerprint[:6]) == big
    assert find_failure_group(state, "zz") is None
    assert sum(g.count for g in failure_groups(state, only_open=False)) == 5


def test_re_driving_a_non_retryable_failure_warns_once_for_the_lot() -> None:
    state = dead_letter_state("c", [dl(0, "schema_resolution", "x"), dl(1, "version_gap", "y"),
                                    dl(2, "bad_magic_byte", "z")], [], {})
    warning = retry_warning(list(state.entries))
    assert warning is not None and warning.startswith("2 of 3 dead letter(s)")
    assert "corrupt_bytes, schema_resolution" in warning and "after a fix is deployed" in warning
    assert retry_warning([state.entries[1]]) is None
    assert {"corrupt_bytes", "schema_resolution", "unknown_schema_id"} <= NON_RETRYABLE
    assert not {"guard_gap", "timeout", "handler_error", "oversize"} & NON_RETRYABLE
