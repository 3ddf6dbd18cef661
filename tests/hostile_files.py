"""Hostile files built small on disk that cost GBs to read carelessly (issue 29, item 2):
compressed batches that inflate to hundreds of MB each, sparse multi-GiB indexes, a
``.log`` preallocated with zeros after its data.

A batch is built by hand (header + CRC-32C over the compressed records block): the block
is one small zstd frame (1 MiB of zeros with a few KiB of random bytes, so it stays
inside the 256x inflation budget) repeated: small on disk, ``frames`` MiB inflated.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import cramjam
import numpy as np

from seglake.record.batch import HEADER, HEADER_SIZE
from seglake.record.codecs import ZSTD
from seglake.record.crc import crc32c

_FRAME_BYTES = 1 << 20


def _frame() -> bytes:
    """A zstd frame of 1 MiB: zeros, and 4.2 KiB of random bytes (ratio under 256)."""
    chunk = bytearray(_FRAME_BYTES)
    chunk[:4300] = np.random.default_rng(29).integers(0, 256, 4300, np.uint8).tobytes()
    return bytes(cramjam.zstd.compress(bytes(chunk), level=1))


def bomb_batch(base_offset: int, frames: int, *, records: int = 1000) -> bytes:
    """A zstd batch claiming ``records`` records whose records block inflates to
    ``frames`` MiB of mostly zeros (not records: the walk refuses it)."""
    block = _frame() * frames
    attributes = ZSTD
    head = HEADER.pack(
        base_offset,
        HEADER_SIZE - 12 + len(block),
        0,
        2,
        0,
        attributes,
        records - 1,
        1000,
        1000,
        -1,
        -1,
        -1,
        records,
    )
    crc = crc32c(head[21:] + block)
    return head[:17] + struct.pack(">I", crc) + head[21:] + block


def write_bombs(directory: Path, batches: int, frames: int, *, records: int = 1000) -> Path:
    """A broker partition directory whose one segment holds ``batches`` bomb batches
    (no index files: they are rebuilt from the log)."""
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / f"{0:020d}.log"
    with open(log, "wb") as f:
        for b in range(batches):
            f.write(bomb_batch(b * records, frames, records=records))
    return log


def sparse(path: Path, size: int) -> Path:
    """Grow ``path`` to ``size`` bytes of zeros that take no disk space."""
    if not path.exists():
        path.touch()
    os.truncate(path, size)
    return path
