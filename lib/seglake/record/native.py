"""The optional compiled kernel of the record codec: ``seglake_native``, plain C
(``native/seglake_native.c``), loaded with ctypes.

``make venv`` installs it (``pip install ./native``) as a top-level module into the venv's
site-packages, outside the package: ``spark-submit.sh`` zips ``lib/seglake`` for the
executors and a shared library cannot be loaded from a zip, while a packed venv carries
it. :func:`kernel` is ``None``, and the numpy code runs, when the module is absent or does
not load, was built for another :data:`ABI_VERSION` (a ``RuntimeWarning`` says so), or
the environment sets ``SEGLAKE_NATIVE=0``. Both paths give the same bytes and arrays
(tests compare them).

The wrappers take and return numpy arrays; a decode wrapper returns ``None`` where the
kernel refuses the bytes, and the caller walks them again with numpy, which names the
problem.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import warnings
from typing import NamedTuple, cast

import numpy as np
import pyarrow as pa

from seglake.format import RECORD_BATCH_OVERHEAD

__all__ = [
    "ABI_VERSION",
    "MODULE",
    "Column",
    "Gathered",
    "Walk",
    "address",
    "assemble",
    "batch_sizes",
    "gather",
    "has_crc",
    "int64s",
    "kernel",
    "load",
    "plan",
    "pool_array",
    "pread_ranges",
    "record_extra",
    "scan",
    "walk",
]

MODULE = "seglake_native"
ABI_VERSION = 10  # sl_abi_version() of the C source this wrapper calls
_P = ctypes.c_void_p
_I = ctypes.c_int64
_COLUMN = [_P, _P, ctypes.c_int, _P]
_SIGNATURES: dict[str, tuple[object, list[object]]] = {
    "sl_abi_version": (_I, []),
    "sl_has_crc": (_I, []),
    "sl_crc32c": (_I, [_P, _I]),
    # data, n, starts, ends, out (record/crc.py)
    "sl_crc_ranges": (None, [_P, _I, _P, _P, _P]),
    # fd, n, starts, lengths, out, got (pread_ranges)
    "sl_pread_ranges": (_I, [_I, _I, _P, _P, _P, _P]),
    "sl_scan": (_I, [_P, _I, _I, _I, _I, _I, _I, _I, _I, _P, _P]),
    "sl_walk": (_I, [_P, _I, *[_P] * 8, _I, *[_P] * 10]),
    "sl_gather": (None, [_P, _I, _P, _P, _P, _P, _P, _P, _P, _P, _P]),
    # blocks, addresses, lengths, codecs, 4 batch arrays, log append, last delta, 4 query
    # arrays, first, scratch, its size, records room, its size, out, its size, max block,
    # state, 4 answer arrays, ok (record/pick_native.py)
    "sl_pick": (_I, [_I, *[_P] * 13, _I, _P, _I, _P, _I, _P, _I, _I, *[_P] * 6]),
    "sl_extra": (None, [_I, _P, _P, _P, _P]),
    "sl_plan": (_I, [_I, _P, _P, _P, _I, _I, _P, _P]),
    "sl_sizes": (None, [_I, _I, _P, _P, _P, _P, _P, _P, _P]),
    # n, nb, starts, base offsets, base timestamps, headers, offset, timestamp, extra;
    # key, value, headers: lengths, offsets, int64 offsets?, data; crc (1: write them); out
    "sl_assemble": (_I, [_I, _I, *[_P] * 7, *_COLUMN * 3, _I, _P]),
    # blocks, addresses, lengths, codecs, first, out, capacity, max block, state, sizes
    "sl_inflate": (_I, [_I, _P, _P, _P, _I, _P, _I, _I, _P, _P]),
    # batches, inputs, first, outputs, capacities, state, scratch, its size, records room,
    # its size, max block, headers (record/decode_fused.py)
    "sl_decode": (_I, [_I, _P, _I, _P, _P, _P, _P, _I, _P, _I, _I, _I]),
    # n, Arrow offsets, int64 offsets?, data, out (record/key_hash.py)
    "sl_xxh64": (None, [_I, _P, _I, _P, _P]),
    # n, hashes, offsets, their scratch twins (storage/key_index.py)
    "sl_sort_pairs": (None, [_I, _P, _P, _P, _P]),
    # n, hashes, blocks, words (storage/key_filter.py)
    "sl_sbbf": (None, [_I, _P, _I, _P]),
}
_loaded: list[ctypes.CDLL | None] = []  # [the kernel or None] once looked for


def load(origin: str | None = None) -> ctypes.CDLL | None:
    """Load the kernel from ``origin`` (default: where ``seglake_native`` is installed);
    ``None`` if there is none, it does not load, or its ABI version differs."""
    if origin is None:
        try:
            spec = importlib.util.find_spec(MODULE)
        except (ImportError, ValueError):
            return None
        origin = spec.origin if spec is not None else None
        if origin is None:
            return None
    try:
        lib = ctypes.CDLL(origin)
        for name, (restype, argtypes) in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
    except (OSError, AttributeError):
        return None
    if (built := lib.sl_abi_version()) != ABI_VERSION:
        warnings.warn(
            f"{origin}: the C kernel was built for ABI {built}, this seglake calls ABI "
            f"{ABI_VERSION}: the numpy code runs instead, several times slower (`make venv` "
            "or `pip install ./native` rebuilds it)",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    return lib


def kernel() -> ctypes.CDLL | None:
    """The loaded kernel, or ``None`` (not installed, or ``SEGLAKE_NATIVE=0``)."""
    if os.environ.get("SEGLAKE_NATIVE", "1") == "0":
        return None
    if not _loaded:
        _loaded.append(load())
    return _loaded[0]


def has_crc(lib: ctypes.CDLL) -> bool:
    """Whether the kernel computes CRC-32C (x86-64 with SSE4.2)."""
    return bool(lib.sl_has_crc())


def scan(
    lib: ctypes.CDLL,
    data: np.ndarray,
    pos: int,
    end: int,
    max_batches: int | None,
    verify_crc: bool,
    prev_last: int | None,
    stop_after: int | None,
) -> tuple[np.ndarray, int, bool]:
    """Batch headers of ``data[pos:end]`` while each is plainly valid (see ``sl_scan``):
    ``(rows, position reached, stopped after stop_after)``; rows: the 13 header fields
    and the position of each batch, ``(k, 14)`` int64, in cache-sized runs."""
    chunks = [np.zeros((0, 14), np.int64)]
    left = (end - pos) // RECORD_BATCH_OVERHEAD + 1 if max_batches is None else max_batches
    state = np.zeros(2, np.int64)
    stopped = False
    while left > 0:
        cap = min(left, (end - pos) // RECORD_BATCH_OVERHEAD + 1, 1 << 14)
        rows = np.empty((cap, 14), np.int64)
        k = lib.sl_scan(
            address(data),
            pos,
            end,
            cap,
            int(verify_crc),
            prev_last is not None,
            prev_last or 0,
            stop_after is not None,
            stop_after or 0,
            address(rows),
            address(state),
        )
        chunks.append(rows[:k])
        pos, stopped = int(state[0]), bool(state[1])
        left -= k
        if k:
            prev_last = int(rows[k - 1, 0] + rows[k - 1, 6])
        if stopped or k < cap:
            break
    return np.concatenate(chunks), pos, stopped


def pread_ranges(fd: int, path: str, pairs: np.ndarray, out: memoryview) -> list[int] | None:
    """Each ``(start, length)`` row of ``pairs`` of the open file ``fd`` into ``out``, back
    to back (it holds them all), in one call (``sl_pread_ranges``: a ``pread`` each, no
    Python step a range): the bytes each got; ``None`` without the kernel. A failed read
    raises ``OSError`` naming ``path`` (the ``pread_many`` of
    :func:`seglake.fs.read_ranges_into`)."""
    lib = kernel()
    if lib is None:
        return None
    arrays = [int64s(pairs[:, 0]), int64s(pairs[:, 1])]
    arrays += [np.frombuffer(out, np.uint8), np.zeros(len(pairs), np.int64)]
    err = lib.sl_pread_ranges(fd, len(pairs), *(address(a) for a in arrays))
    if err:
        raise OSError(err, os.strerror(err), path)
    done: list[int] = arrays[3].tolist()
    return done


def int64s(a: np.ndarray) -> np.ndarray:
    """``a`` as a C-contiguous int64 array (no copy if it is one)."""
    return np.ascontiguousarray(a, dtype=np.int64)


def address(a: np.ndarray) -> int:
    """Address of a C-contiguous array's data (an Arrow buffer's: 4x faster than
    ``a.ctypes.data``)."""
    return cast(int, pa.py_buffer(a).address)


def pool_array(n: int, dtype: type = np.uint8) -> np.ndarray:
    """An uninitialised array from Arrow's memory pool: it reuses the memory of freed
    buffers, where a fresh numpy array of 100 MB pays a page fault per page."""
    return np.frombuffer(pa.allocate_buffer(n * np.dtype(dtype).itemsize), dtype)


def _offsets_and_bits(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Arrow int32 offsets (``n + 1``) and zeroed validity bits of an ``n``-value column."""
    return np.zeros(n + 1, np.int32), np.zeros((n + 7) // 8, np.uint8)


class Walk(NamedTuple):
    """Per record: ``offset``, ``timestamp``; Arrow buffers of the key and value columns
    (int32 offsets, validity bits) and of the headers list (int32 offsets); ``totals``:
    key bytes, value bytes, headers, header key bytes, header value bytes, null keys,
    null values, null header values; with ``places``, where each record's bytes (its
    length varint first) begin and end in the data (else None)."""

    offset: np.ndarray
    timestamp: np.ndarray
    key_off: np.ndarray
    key_valid: np.ndarray
    value_off: np.ndarray
    value_valid: np.ndarray
    header_off: np.ndarray
    totals: list[int]
    rec_start: np.ndarray | None = None
    rec_end: np.ndarray | None = None


def walk(
    lib: ctypes.CDLL,
    data: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    counts: np.ndarray,
    bases: tuple[np.ndarray, np.ndarray, np.ndarray],
    log_append: np.ndarray,
    last_delta: np.ndarray,
    *,
    places: bool = False,
) -> Walk | None:
    """Walk and check the records of blocks ``data[start[b]:end[b]]`` (``counts[b]``
    records each; ``bases``: base offset, base timestamp, max timestamp per block;
    ``places``: each record's start and end too).
    ``None``: bytes the kernel refuses, or a column past int32 offsets. Nothing is
    allocated from a count that does not fit its block (7 bytes a record at least)."""
    if ((counts < 0) | (counts > (end - start) // 7)).any():
        return None
    n = int(counts.sum())
    out = Walk(
        pool_array(n, np.int64),
        pool_array(n, np.int64),
        *_offsets_and_bits(n),
        *_offsets_and_bits(n),
        np.empty(n + 1, np.int32),
        [],
        *((pool_array(n, np.int64), pool_array(n, np.int64)) if places else ()),
    )
    totals = np.zeros(8, np.int64)
    args = [int64s(a) for a in (start, end, counts, *bases)]
    la = np.ascontiguousarray(log_append, dtype=np.uint8)
    ld = int64s(last_delta)
    rc = lib.sl_walk(
        address(data),
        len(start),
        *(address(a) for a in args),
        address(la),
        address(ld),
        n,
        *(address(a) for a in out[:7]),
        address(totals),
        *(address(a) if a is not None else None for a in out[8:]),
    )
    if rc:
        return None
    out.totals.extend(totals.tolist())
    return out


class Gathered(NamedTuple):
    """Data buffers of the key and value columns; header keys (offsets, data) and
    values (offsets, validity bits, data)."""

    key_data: np.ndarray
    value_data: np.ndarray
    hkey_off: np.ndarray
    hkey_data: np.ndarray
    hvalue_off: np.ndarray
    hvalue_valid: np.ndarray
    hvalue_data: np.ndarray


def gather(
    lib: ctypes.CDLL,
    data: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    w: Walk,
    *,
    headers: bool = True,
) -> Gathered:
    """Copy the keys, values and headers of records :func:`walk` accepted (``headers``
    False: not the headers; their buffers are then empty)."""
    kb, vb, nh, hkb, hvb = w.totals[:5]
    if not headers:
        nh = hkb = hvb = 0
    g = Gathered(
        pool_array(kb),
        pool_array(vb),
        np.zeros(nh + 1, np.int32),
        pool_array(hkb),
        *_offsets_and_bits(nh),
        pool_array(hvb),
    )
    s, e = int64s(start), int64s(end)
    lib.sl_gather(
        address(data),
        len(s),
        address(s),
        address(e),
        *(address(a) if a is not None else None for a in g[:2]),
        *(address(a) if nh else None for a in g[2:]),
    )
    return g


def record_extra(
    lib: ctypes.CDLL, klen: np.ndarray, vlen: np.ndarray, hbytes: np.ndarray | None
) -> np.ndarray:
    """Each record's size without its length and delta varints (``extra`` below): key and
    value lengths (-1 null), ``hbytes`` the headers' count varint and bytes (None: none)."""
    out = np.empty(len(klen), np.int64)
    k, v = int64s(klen), int64s(vlen)
    h = None if hbytes is None else int64s(hbytes)
    lib.sl_extra(len(k), address(k), address(v), None if h is None else address(h), address(out))
    return out


def plan(
    lib: ctypes.CDLL,
    extra: np.ndarray,
    off: np.ndarray,
    ts: np.ndarray,
    batch_size: int,
    max_records: int,
) -> tuple[np.ndarray, np.ndarray]:
    """``(starts, sizes)`` of batches planned by kafka-python's rule (see
    :func:`seglake.record.plan.plan_exact`); ``extra``: each record's size without its
    length and delta varints."""
    n = len(extra)
    starts = np.empty(n, np.int64)
    sizes = np.empty(n, np.int64)
    e, o, t = int64s(extra), int64s(off), int64s(ts)
    nb = lib.sl_plan(
        n,
        address(e),
        address(o),
        address(t),
        batch_size,
        max_records,
        address(starts),
        address(sizes),
    )
    return starts[:nb].copy(), sizes[:nb].copy()


def batch_sizes(
    lib: ctypes.CDLL,
    extra: np.ndarray,
    off: np.ndarray,
    ts: np.ndarray,
    starts: np.ndarray,
    bases: tuple[np.ndarray, np.ndarray],
) -> np.ndarray:
    """Whole size (header included) of each batch of given ``starts`` and ``bases``."""
    sizes = np.empty(len(starts), np.int64)
    arrays = [int64s(a) for a in (starts, *bases, extra, off, ts)]
    lib.sl_sizes(len(extra), len(starts), *(address(a) for a in arrays), address(sizes))
    return sizes


class Column(NamedTuple):
    """A binary column for :func:`assemble`: ``lens`` (int64, -1 null; headers: their
    counts), the addresses of its Arrow offsets (at the array's first element; int64 if
    ``wide``) and data, and ``keep``: what owns those buffers."""

    lens: np.ndarray
    offsets: int
    wide: bool
    data: int
    keep: object


def assemble(
    lib: ctypes.CDLL,
    total: int,
    starts: np.ndarray,
    bases: tuple[np.ndarray, np.ndarray],
    headers: np.ndarray,
    columns: tuple[np.ndarray, np.ndarray, np.ndarray],
    key: Column,
    value: Column,
    record_headers: Column | None,
    crc: bool,
) -> np.ndarray:
    """``total`` bytes of batches: each ``headers[b]`` (61 bytes) then its records.
    ``columns``: offset, timestamp, and size without the length and delta varints, of
    each record; ``record_headers``: each record's encoded headers (None: no headers).
    With ``crc`` (only where :func:`has_crc`), each batch's CRC-32C is written too."""
    out = pool_array(total)
    arrays = [int64s(a) for a in (starts, *bases)]
    hdr = np.ascontiguousarray(headers, dtype=np.uint8)
    cols = [int64s(a) for a in columns]
    args: list[object] = []
    for c in (key, value, record_headers):
        if c is None:
            args += [None, None, 0, None]
        else:
            lens = int64s(c.lens)
            cols.append(lens)  # kept alive until the call returns
            args += [address(lens), c.offsets or None, int(c.wide), c.data or None]
    written = lib.sl_assemble(
        len(columns[0]),
        len(starts),
        *(address(a) for a in arrays),
        address(hdr),
        *(address(a) for a in cols[:3]),
        *args,
        crc,
        address(out),
    )
    if written != total:  # both sizes come from the same rule: a bug, not bad input
        raise AssertionError(f"assembled {written} bytes, planned {total}")
    return out
