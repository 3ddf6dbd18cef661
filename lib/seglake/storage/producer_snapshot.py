"""``.snapshot`` files: a broker's producer state at an offset (``ProducerStateManager``).

seglake writes none (its readers do not need producer state); ``seglake dump`` reads a
broker's. Layout, big-endian (version 1)::

    version:int16 (1)  crc:uint32 (CRC-32C of everything after it)  count:int32
    count x  producerId:int64 producerEpoch:int16 lastSequence:int32 lastOffset:int64
             offsetDelta:int32 timestamp:int64 coordinatorEpoch:int32
             currentTxnFirstOffset:int64 (-1: no open transaction)
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from seglake.errors import CorruptIndexError
from seglake.record.batch import decrement_sequence
from seglake.record.crc import crc32c

_HEAD = struct.Struct(">hIi")
_ENTRY = struct.Struct(">qhiqiqiq")
VERSION = 1


class ProducerEntry(NamedTuple):
    """One producer's state as the snapshot keeps it (its last batch's metadata)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int  # -1: none

    @property
    def first_sequence(self) -> int:
        """Kafka's ``decrementSequence(lastSequence, offsetDelta)`` (wraps at int32 max)."""
        return decrement_sequence(self.last_sequence, self.offset_delta)


def read_producer_snapshot(data: bytes, *, path: str | None = None) -> list[ProducerEntry]:
    """The entries of a producer snapshot; :class:`CorruptIndexError` naming the file and
    the numbers for a wrong version, CRC or length."""
    where = f"{path}: " if path else ""
    if len(data) < _HEAD.size:
        raise CorruptIndexError(
            f"{where}producer snapshot of {len(data)} bytes (the header is {_HEAD.size})"
        )
    version, crc, count = _HEAD.unpack_from(data)
    if version != VERSION:
        raise CorruptIndexError(f"{where}producer snapshot version {version} (expected 1)")
    computed = crc32c(data[6:])
    if computed != crc:
        raise CorruptIndexError(
            f"{where}producer snapshot CRC-32C mismatch (stored {crc:#010x}, "
            f"computed {computed:#010x})"
        )
    if count < 0 or len(data) != _HEAD.size + count * _ENTRY.size:
        raise CorruptIndexError(
            f"{where}producer snapshot of {len(data)} bytes claims {count} entries "
            f"of {_ENTRY.size} bytes"
        )
    return [
        ProducerEntry(*_ENTRY.unpack_from(data, _HEAD.size + i * _ENTRY.size)) for i in range(count)
    ]
