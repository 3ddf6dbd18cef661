"""Point reads' picks in the compiled kernel (``sl_pick``, :mod:`seglake.record.pick_native`)
against the record walk and numpy picks they stand in for (:meth:`Gather.pick`, the reader's
``pick_records``, without the kernel): the same record for every query (offsets, timestamps
with a lower bound, batches without an answer), the same batches that do not walk, on every
codec and damaged logs."""

from __future__ import annotations

from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from seglake.errors import SeglakeError
from seglake.record import native, reader
from seglake.record.batch import scan_batches
from seglake.storage.point_gather import Gather
from seglake.storage.segment_window import Window
from tests.unit.test_native import HYPO, log_with_headers, needs_kernel, window_logs


def picks(buf: bytes, cut: int, seed: int):
    """``(kernel's, numpy's)`` outcome of one :meth:`Gather.pick` over ``buf``'s batches
    (two gather parts split at batch ``cut``) for random queries: per query the decoded
    record (or None), and the batches that do not walk."""
    scan = scan_batches(buf, verify_crc=False, stop_on_crc_error=False)
    w = Window(0, buf, scan)
    k = min(cut, len(scan))
    rng = np.random.default_rng(seed)
    n = 40
    ids = rng.integers(-1, max(len(scan), 1), n)
    lo_off = int(scan.base_offset.min()) if len(scan) else 0
    hi_off = int(scan.last_offset.max()) + 2 if len(scan) else 2
    is_ts = rng.random(n) < 0.5
    ts = scan.max_timestamp if len(scan) else np.zeros(1, np.int64)

    def between(low: int, high: int) -> np.ndarray:  # forged fields reach int64's ends
        low, high = max(low, -(2**63)), min(high, 2**63 - 1)
        return rng.integers(low, max(high, low + 1), n)

    targets = np.where(
        is_ts, between(int(ts.min()) - 5, int(ts.max()) + 5), between(lo_off - 1, hi_off)
    )
    lo = between(lo_off - 1, hi_off) * (rng.random(n) < 0.3)

    def one():
        g = Gather()
        if len(scan):
            g.add(w, np.arange(k), "a.log")
            g.add(w, np.arange(k, len(scan)), "b.log")
        else:
            ids[:] = -1
        try:
            record, bad = g.pick(ids.copy(), targets, lo, is_ts)
            table, row = g.decode(record)
        except SeglakeError as exc:
            return type(exc), str(exc)
        rows = table.to_pylist()
        return [rows[r] if r >= 0 else None for r in row.tolist()], bad.tolist()

    fast = one()
    with patch.object(native, "kernel", lambda: None):
        slow = one()
    return fast, slow


@needs_kernel
@HYPO
@given(buf=window_logs(), cut=st.integers(0, 6), seed=st.integers(0, 2**16))
def test_kernel_picks_are_the_walks(buf, cut, seed):
    fast, slow = picks(buf, cut, seed)
    assert fast == slow


@needs_kernel
def test_a_clean_log_is_picked_in_the_kernel():
    """Kafka's codecs: the kernel takes every batch (its walk holds just the picks)."""
    calls = []
    real = reader._kernel_picks

    def spy(*args):
        calls.append(real(*args))
        return calls[-1]

    for codec in (0, 3):
        calls.clear()
        with patch("seglake.record.reader._kernel_picks", spy):
            fast, _ = picks(log_with_headers(codec), 2, codec)
        assert calls[0] is not None and calls[1] is None  # the kernel's call, numpy's
        walk, record = calls[0]
        assert len(walk.offset) == len(np.unique(record[record >= 0]))
        assert any(r is not None for r in fast[0])
    fast, slow = picks(log_with_headers(3), 2, 7)
    assert fast == slow


@pytest.mark.parametrize("codec", [1, 2, 4])
def test_other_codecs_fall_back_alike(codec):
    fast, slow = picks(log_with_headers(codec), 3, codec)
    assert fast == slow


@needs_kernel
def test_large_records_grow_the_buffers_alike():
    """Batches of 1.5 MiB (past the 1 MiB scratch buffer) and picked records of 300 KB
    (past the room first given for them): the buffers grow, the picks are the walk's."""
    from seglake.record.encode import encode_batches
    from tests.unit.test_encode import table

    recs = [
        (i, 1_700_000_000_000 + i, b"k%d" % i, bytes([65 + i % 26]) * 300_000, None)
        for i in range(20)
    ]
    buf = encode_batches(table(recs), codec=3, batch_starts=np.arange(0, 20, 5)).tobytes()
    calls = []
    real = reader._kernel_picks

    def spy(*args):
        calls.append(real(*args))
        return calls[-1]

    with patch("seglake.record.reader._kernel_picks", spy):
        fast, slow = picks(buf, 2, 3)
    assert calls[0] is not None and fast == slow
    assert sum(r is not None for r in fast[0]) > 10
