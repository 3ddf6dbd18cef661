"""Records blocks decompressed by the compiled kernel (``sl_inflate``): raw blocks copied,
Kafka's lz4 frames decoded in C (a bounds-checked LZ4 block decoder), many blocks a call,
into the buffer of a :class:`~seglake.record.codecs.Inflater`. What the kernel does not
take (other codecs, frames it does not take, a frame past its limit) it leaves to the
caller, which decompresses that block the usual way and calls again from the next: both
give the same bytes, limits and errors (tests compare them)."""

from __future__ import annotations

import ctypes
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from seglake.record.codecs import Inflater
from seglake.record.native import address

__all__ = ["Sources", "inflate_run", "sources"]


class Sources(NamedTuple):
    """Where each block's bytes are (addresses, lengths, int64) and ``keep``: what owns
    them (kept alive while the kernel reads them)."""

    addr: np.ndarray
    length: np.ndarray
    keep: object


def sources(
    blocks: list[memoryview] | tuple[np.ndarray, np.ndarray, np.ndarray],
) -> Sources:
    """:class:`Sources` of ``blocks``: memoryviews, or ``(data, start, end)`` (block ``b``
    is ``data[start[b]:end[b]]``)."""
    if isinstance(blocks, tuple):
        data, start, end = blocks
        base = pa.py_buffer(data).address if len(data) else 0
        return Sources(
            np.ascontiguousarray(base + start, np.int64),
            np.ascontiguousarray(end - start, np.int64),
            data,
        )
    addr = np.array([pa.py_buffer(v).address if len(v) else 0 for v in blocks], np.int64)
    return Sources(addr, np.array([len(v) for v in blocks], np.int64), blocks)


def inflate_run(
    lib: ctypes.CDLL,
    out: Inflater,
    src: Sources,
    codec: np.ndarray,
    b: int,
    max_block: int,
    left: int,
    sizes: np.ndarray,
) -> tuple[int, int]:
    """Append blocks ``b``, ``b + 1``, ... to ``out`` in the kernel (``sizes[b]``: bytes
    appended; each lz4 block at most ``min(max_block, left)`` bytes, which it then uses
    up), growing the buffer when a block may need more room, until one the kernel does
    not take. Returns ``(that block, or len(codec) when all are done, left)``."""
    codec = np.ascontiguousarray(codec, np.int64)
    state = np.array([out.used, left, 0], np.int64)
    n = len(codec)
    while True:
        buf = out.buffer
        b = lib.sl_inflate(
            n,
            address(src.addr),
            address(src.length),
            address(codec),
            b,
            address(buf) if len(buf) else None,
            len(buf),
            max_block,
            address(state),
            address(sizes),
        )
        out.used = int(state[0])
        if b == n or not state[2]:
            return b, int(state[1])
        out.reserve(int(state[2]))  # grows the buffer: room for that block
