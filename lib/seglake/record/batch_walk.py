"""The one walk over batches' records: decompress each batch's records block into one
buffer, follow every record's length chain (:mod:`seglake.record.walk`, vectorised over
all batches), read each record's fields and place its offset and timestamp::

    records block of batch b   data[start[b]:end[b]]   (decompressed where needed)
    offset of a record         baseOffset + offsetDelta
    timestamp of a record      baseTimestamp + timestampDelta, or maxTimestamp for every
                               record of a LogAppendTime batch

:func:`walk_batches` raises :class:`CorruptRecordError` at the first batch that does not
walk (the decoder's use); with ``set_aside`` it gives that batch no records instead
(``ok`` False), walks the others again, and reads only the two deltas (the window
readers' use: the batch is decoded later the usual way, which names the problem).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from seglake.errors import CorruptRecordError
from seglake.record import native
from seglake.record.batch import HEADER_SIZE, TIMESTAMP_TYPE_BIT, BatchScan
from seglake.record.codecs import Inflater, OutputLimitError, inflate_budget
from seglake.record.inflate_native import inflate_run, sources
from seglake.record.walk import BatchContext, read_fields, walk_records

__all__ = ["Walked", "batch_blocks", "record_blocks", "walk_batches"]


class Walked(NamedTuple):
    """Records of the batches ``sel`` of a scan, found and checked up to their headers
    (with ``set_aside``: up to their offset delta)."""

    sel: np.ndarray
    data: np.ndarray  # the records blocks (:func:`record_blocks`)
    ctx: BatchContext  # rec_batch: index into ``sel`` of each record's batch
    start: np.ndarray  # records block of each batch: data[start[b]:end[b]]
    end: np.ndarray
    body: np.ndarray  # each record's attributes byte (after its length varint)
    rec_end: np.ndarray
    fields: dict[str, np.ndarray]  # :func:`~seglake.record.walk.read_fields`
    log_append: np.ndarray  # per batch of ``sel``
    offset: np.ndarray
    timestamp: np.ndarray
    ok: np.ndarray  # per batch of ``sel``: False if set aside


def walk_batches(
    buf: bytes | bytearray | memoryview | list[Any],
    scan: BatchScan,
    sel: np.ndarray,
    path: str | None,
    limits: tuple[int, int | None],
    *,
    set_aside: bool = False,
) -> Walked:
    """Decompress, walk and check the records of the batches ``sel`` of ``scan``.

    ``buf`` holds the batches at ``scan.position``; or it is a list with one buffer per
    batch of ``sel``, the batch at position 0 of its buffer (batches of many windows).
    ``limits``: bytes one block, and all blocks together (``None``:
    :func:`inflate_budget`), may decompress to. Errors name the batch by ``path`` and
    its position (by its index in ``sel`` with a list ``buf``).
    """
    ok = np.ones(len(sel), dtype=bool)
    data, ctx, start, end = batch_blocks(buf, scan, sel, path, limits, ok if set_aside else None)
    counts = scan.records_count[sel]
    while True:
        ctx.counts = np.where(ok, counts, 0)
        block = np.where(ok, start, end)  # a batch set aside: an empty block
        try:
            ctx.index_records(block, end)  # one entry per record, once counts are bounded
            body, rec_end = walk_records(data, block, end, ctx)
            f = read_fields(data, body, rec_end, ctx, deltas_only=set_aside)
            _check_offset_deltas(scan, sel, f["offset_delta"], ctx)
            break
        except CorruptRecordError as exc:
            if not set_aside:
                raise
            ok[int(np.argmax(ctx.position == exc.position))] = False
    rec_batch = ctx.rec_batch
    log_append = (scan.attributes[sel] & TIMESTAMP_TYPE_BIT) != 0
    timestamp = np.where(
        log_append[rec_batch],
        scan.max_timestamp[sel][rec_batch],
        scan.base_timestamp[sel][rec_batch] + f["timestamp_delta"],
    )
    offset = scan.base_offset[sel][rec_batch] + f["offset_delta"]
    return Walked(sel, data, ctx, block, end, body, rec_end, f, log_append, offset, timestamp, ok)


def batch_blocks(
    buf: bytes | bytearray | memoryview | list[Any],
    scan: BatchScan,
    sel: np.ndarray,
    path: str | None,
    limits: tuple[int, int | None],
    ok: np.ndarray | None = None,
) -> tuple[np.ndarray, BatchContext, np.ndarray, np.ndarray]:
    """``(data, ctx, start, end)``: the records blocks of the batches ``sel`` (arguments
    as :func:`walk_batches`), block ``b`` is ``data[start[b]:end[b]]``: the buffer itself
    when no block is compressed, else :func:`record_blocks` (with ``ok``: a block that
    does not decompress is set aside)."""
    position, size = scan.position[sel], scan.size[sel]
    if isinstance(buf, list):
        views = [
            memoryview(b).cast("B")[HEADER_SIZE:z] for b, z in zip(buf, size.tolist(), strict=True)
        ]
        ctx = BatchContext(
            path, np.arange(len(sel)), scan.base_offset[sel], scan.records_count[sel]
        )
        data = np.zeros(0, dtype=np.uint8)
    else:
        data = np.frombuffer(memoryview(buf).cast("B"), dtype=np.uint8)
        end = position + size
        if len(sel) and (int(position.min()) < 0 or int(end.max()) > len(data)):
            raise CorruptRecordError(
                f"scan describes batches up to byte {int(end.max())}, the buffer has {len(data)}",
                path=path,
            )
        views = None
        ctx = BatchContext(path, position, scan.base_offset[sel], scan.records_count[sel])
    codec = scan.codec[sel]
    if views is None and not ((codec != 0) & (size > HEADER_SIZE)).any():
        start, end = position + HEADER_SIZE, position + size  # no copy
    else:
        blocks = (data, position + HEADER_SIZE, position + size) if views is None else views
        data, start, end = record_blocks(blocks, codec, ctx, limits, ok)
    return data, ctx, start, end


def _check_offset_deltas(
    scan: BatchScan, sel: np.ndarray, offset_delta: np.ndarray, ctx: BatchContext
) -> None:
    """Each record's offset delta lies in [0, lastOffsetDelta] and increases."""
    rec_batch = ctx.rec_batch
    last_delta = (scan.last_offset[sel] - scan.base_offset[sel])[rec_batch]
    ctx.check(
        (offset_delta < 0) | (offset_delta > last_delta),
        lambda i: (
            f"offset delta {int(offset_delta[i])} is outside [0, lastOffsetDelta "
            f"{int(last_delta[i])}]"
        ),
    )
    same = rec_batch[1:] == rec_batch[:-1]
    back = np.concatenate(([False], same & (offset_delta[1:] <= offset_delta[:-1])))
    ctx.check(
        back,
        lambda i: f"offset delta {int(offset_delta[i])} does not follow {int(offset_delta[i - 1])}",
    )


def record_blocks(
    blocks: list[memoryview] | tuple[np.ndarray, np.ndarray, np.ndarray],
    codec: np.ndarray,
    ctx: BatchContext,
    limits: tuple[int, int | None],
    ok: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(data, start, end)``: the records blocks joined into one buffer, decompressed
    where needed; block ``b`` is ``data[start[b]:end[b]]``. ``blocks``: memoryviews, or
    ``(buffer, start, end)`` (block ``b`` at ``buffer[start[b]:end[b]]``). ``limits``:
    bytes one block, and all blocks together (``None``: :func:`inflate_budget`), may
    decompress to. A block past them or that does not decompress raises naming its
    batch; with ``ok`` it is set aside instead (``ok[b]`` False, an empty block). The
    compiled kernel copies raw blocks and decodes lz4 ones (:func:`inflate_run`), the
    rest are decompressed here, block by block, in order."""
    src = sources(blocks)
    packed = (codec != 0) & (src.length > 0)
    max_block, budget = limits
    if budget is None:
        budget = inflate_budget(int(src.length[packed].sum()))
    out = Inflater()
    sizes = np.zeros(len(codec), dtype=np.int64)
    left, b, lib = budget, 0, native.kernel()
    if lib is not None and len(codec):  # room for 8x (pages never written cost nothing)
        guess = min(budget, 8 * int(src.length[packed].sum())) + int(src.length[~packed].sum())
        out.reserve(guess + (64 << 10))
    while b < len(codec):
        if lib is not None:
            b, left = inflate_run(lib, out, src, codec, b, max_block, left, sizes)
            if b == len(codec):
                break
        view = _block(blocks, b)
        if not packed[b]:
            sizes[b] = out.append_raw(view)
            b += 1
            continue
        limit = min(max_block, left)
        try:
            sizes[b] = out.append(int(codec[b]), view, limit)
        except (OutputLimitError, CorruptRecordError) as exc:
            if ok is None:
                raise _block_error(ctx, b, exc, limit == max_block, budget) from None
            ok[b] = False
        else:
            left -= int(sizes[b])
        b += 1
    new_end = np.cumsum(sizes)
    return out.data, new_end - sizes, new_end


def _block(
    blocks: list[memoryview] | tuple[np.ndarray, np.ndarray, np.ndarray], b: int
) -> memoryview:
    if isinstance(blocks, tuple):
        data, start, end = blocks
        return memoryview(data)[int(start[b]) : int(end[b])]  # type: ignore[arg-type]  # ndarray
    return blocks[b]


def _block_error(
    ctx: BatchContext, b: int, exc: CorruptRecordError, whole_block: bool, budget: int
) -> CorruptRecordError:
    if isinstance(exc, OutputLimitError):
        why = (
            "max_batch_bytes"
            if whole_block
            else f"what is left of the {budget}-byte budget of this read"
        )
        return ctx.error(b, f"records block: {exc} ({why})")
    return ctx.error(b, f"records block: {exc}")
