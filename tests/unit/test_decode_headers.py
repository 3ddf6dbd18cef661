"""Decoding without the headers column (``decode_batches(..., headers=False)``, what a read
without ``includeHeaders`` asks for): on the kernel's path and the numpy one, the headers-on
table is unchanged (kafka-python's reader as the oracle) and the headers-off table is it
minus the column, on random logs, mutated logs and the broker's fixture partitions."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglake.record.batch import scan_batches
from seglake.record.reader import decode_batches
from seglake.record.schema import RECORD_SCHEMA, to_kafka_source, without_headers
from tests.conftest import FIXTURE_PARTITIONS, FIXTURES
from tests.unit.test_decode import batches, build_log, kafka_python_rows
from tests.unit.test_fuzz import mutated_logs
from tests.unit.test_native import both, log_with_headers, same_outcome

HYPO = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def off_is_on_minus_headers(on, off) -> None:
    """``off`` (a headers-off outcome) against ``on`` (the headers-on one): the same table
    without the column, or the same error (a header key that is not UTF-8 is only an error
    where the keys are decoded)."""
    if isinstance(on, tuple):  # an error
        if "is not valid UTF-8" in on[1] and not isinstance(off, tuple):
            assert off.schema == without_headers(RECORD_SCHEMA)
        else:
            assert off == on
    else:
        assert not isinstance(off, tuple), off
        assert off.schema == without_headers(RECORD_SCHEMA)
        assert off.equals(on.drop_columns(["headers"]))


@HYPO
@given(spec=batches)
def test_headers_off_is_headers_on_minus_the_column(spec) -> None:
    buf, _ = build_log(spec)
    scan = scan_batches(buf)
    expected = kafka_python_rows(buf)
    for on, off in zip(
        both(decode_batches, buf, scan), both(decode_batches, buf, scan, headers=False), strict=True
    ):
        assert on.to_pylist() == expected  # headers on: unchanged
        off_is_on_minus_headers(on, off)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    buf=st.one_of(
        mutated_logs(), mutated_logs(log_with_headers(0)), mutated_logs(log_with_headers(4))
    ),
    skip=st.booleans(),
)
def test_mutated_logs_headers_off(buf, skip) -> None:
    """Damaged bytes: the kernel and numpy agree with headers off too, and each path's
    headers-off outcome is its headers-on one minus the column (or the same error)."""
    scan = scan_batches(buf, skip_corrupt=skip)
    fast_on, slow_on = both(decode_batches, buf, scan)
    fast_off, slow_off = both(decode_batches, buf, scan, headers=False)
    same_outcome(fast_off, slow_off)
    off_is_on_minus_headers(fast_on, fast_off)
    off_is_on_minus_headers(slow_on, slow_off)


@pytest.mark.parametrize("partition", FIXTURE_PARTITIONS)
def test_broker_fixtures_headers_off(partition: str) -> None:
    logs = sorted((FIXTURES / partition).glob("*.log"))
    assert logs
    for log in logs:
        buf = log.read_bytes()
        scan = scan_batches(buf)
        for skip_control in (True, False):
            for on, off in zip(
                both(decode_batches, buf, scan, skip_control=skip_control),
                both(decode_batches, buf, scan, skip_control=skip_control, headers=False),
                strict=True,
            ):
                off_is_on_minus_headers(on, off)
                kafka_on = to_kafka_source(on, partition, 0)
                kafka_off = to_kafka_source(off, partition, 0)
                assert kafka_off.equals(kafka_on.drop_columns(["headers"]))
