"""What :func:`~seglake.record.encode.encode_batches` returns (:class:`EncodedBatches`:
batches back to back, one array element per batch) and its per-batch byte steps: the
CRC-32C of bytes ``[21, end)`` of every batch, and compression of each records block
(61-byte header, then the block; ``batchLength`` and CRC rewritten)."""

from __future__ import annotations

import dataclasses

import numpy as np

from seglake.format import LOG_OVERHEAD
from seglake.record.batch import (
    ATTRIBUTES_OFFSET,
    CODEC_MASK,
    HEADER_SIZE,
    BatchScan,
)
from seglake.record.codecs import compress
from seglake.record.crc import crc32c

__all__ = ["EncodedBatches", "compress_batches", "empty_batches"]


@dataclasses.dataclass
class EncodedBatches:
    """Batches encoded back to back in ``data``, and one array element per batch.

    ``first_timestamp`` is the header's baseTimestamp. ``min_timestamp`` and
    ``max_timestamp`` are the smallest and largest record timestamps as a reader sees
    them (a LogAppendTime batch: both are its maxTimestamp, the append time).
    ``record_start`` is the index, in the input, of the batch's first record.
    """

    data: np.ndarray  # uint8, all batches back to back
    position: np.ndarray  # int64, where each batch starts in data
    size: np.ndarray  # int64, whole batch size (batchLength + 12)
    base_offset: np.ndarray  # int64
    last_offset: np.ndarray  # int64
    records_count: np.ndarray  # int64
    first_timestamp: np.ndarray  # int64, baseTimestamp
    max_timestamp: np.ndarray  # int64, header maxTimestamp
    min_timestamp: np.ndarray  # int64
    record_start: np.ndarray  # int64
    attributes: np.ndarray  # int64
    base_sequence: np.ndarray  # int64
    producer_id: int = -1
    producer_epoch: int = -1
    leader_epoch: int = 0

    def __len__(self) -> int:
        return len(self.position)

    @property
    def nbytes(self) -> int:
        """Total size of all batches."""
        return len(self.data)

    @property
    def codec(self) -> int:
        """Codec id of the batches (0 when there are none)."""
        return int(self.attributes[0]) & CODEC_MASK if len(self) else 0

    def batch_bytes(self, i: int) -> memoryview:
        """The bytes of batch ``i`` (a view into ``data``)."""
        start = int(self.position[i])
        return memoryview(self.data)[start : start + int(self.size[i])]  # type: ignore[arg-type]  # ndarray

    def tobytes(self) -> bytes:
        return self.data.tobytes()

    def to_scan(self) -> BatchScan:
        """The batches as :func:`~seglake.record.batch.scan_batches` would report them."""
        n = len(self)
        return BatchScan(
            position=self.position,
            size=self.size,
            base_offset=self.base_offset,
            last_offset=self.last_offset,
            records_count=self.records_count,
            base_timestamp=self.first_timestamp,
            max_timestamp=self.max_timestamp,
            attributes=self.attributes,
            producer_id=np.full(n, self.producer_id, dtype=np.int64),
            producer_epoch=np.full(n, self.producer_epoch, dtype=np.int64),
            base_sequence=self.base_sequence,
            leader_epoch=np.full(n, self.leader_epoch, dtype=np.int64),
            crc_valid=np.ones(n, dtype=bool),
            valid_bytes=len(self.data),
        )


def compress_batches(
    data: np.ndarray,
    position: np.ndarray,
    size: np.ndarray,
    hdr: np.ndarray,
    codec: int,
    level: int | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Compress each batch's records block; new headers (batchLength, CRC) and layout."""
    view = memoryview(data)  # type: ignore[arg-type]  # ndarray
    starts = (position + HEADER_SIZE).tolist()
    ends = (position + size).tolist()
    blocks = [compress(codec, view[a:b], level) for a, b in zip(starts, ends, strict=True)]
    new_size = np.array([len(b) for b in blocks], dtype=np.int64) + HEADER_SIZE
    hdr["batch_length"] = new_size - LOG_OVERHEAD
    raw = hdr.view(np.uint8).reshape(len(hdr), -1)
    hdr["crc"] = [crc32c(b, crc32c(raw[i, ATTRIBUTES_OFFSET:])) for i, b in enumerate(blocks)]  # type: ignore[arg-type]
    head = hdr.tobytes()
    parts: list[bytes] = []
    for i, block in enumerate(blocks):
        parts.append(head[i * HEADER_SIZE : (i + 1) * HEADER_SIZE])
        parts.append(block)
    position = np.zeros(len(hdr), dtype=np.int64)
    np.cumsum(new_size[:-1], out=position[1:])
    return np.frombuffer(b"".join(parts), dtype=np.uint8), position, new_size


def empty_batches(producer_id: int, producer_epoch: int, leader_epoch: int) -> EncodedBatches:
    """No batches (the producer fields kept)."""
    e = np.zeros(0, dtype=np.int64)
    return EncodedBatches(
        data=np.zeros(0, dtype=np.uint8),
        position=e.copy(),
        size=e.copy(),
        base_offset=e.copy(),
        last_offset=e.copy(),
        records_count=e.copy(),
        first_timestamp=e.copy(),
        max_timestamp=e.copy(),
        min_timestamp=e.copy(),
        record_start=e.copy(),
        attributes=e.copy(),
        base_sequence=e.copy(),
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        leader_epoch=leader_epoch,
    )
