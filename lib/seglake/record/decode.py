"""Decode the records of RecordBatch v2 batches into the internal record table.

Record, inside a batch's records block (after decompression); varints are zig-zag::

    length          varint   bytes of the record after this field (>= 6)
    attributes      int8     unused
    timestampDelta  varlong  timestamp = baseTimestamp + delta (LogAppendTime: maxTimestamp)
    offsetDelta     varint   offset = baseOffset + delta, 0 <= delta <= lastOffsetDelta
    keyLength       varint   -1 = null key
    key             bytes
    valueLength     varint   -1 = null value (tombstone)
    value           bytes
    headerCount     varint
    headers         headerCount x (keyLength varint >= 0, key UTF-8,
                                   valueLength varint (-1 = null), value)

Vectorised: the only per-record step that cannot be is finding where each record starts
(``p += length``). That chain is walked for all batches at once, one record per batch per
numpy step; the few long batches left at the end are walked in Python. All fields are then
read with numpy over all records of all batches, and keys/values (and headers) are gathered
by Arrow: a ``binary_view`` array pointing into the records blocks, cast to ``binary``.

Bytes that do not decode raise :class:`CorruptRecordError` naming the file, the batch
position, the record and the numbers; nothing is allocated from an unchecked length.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from seglake.errors import CorruptRecordError
from seglake.record.batch import (
    CODEC_MASK,
    HEADER_SIZE,
    TIMESTAMP_TYPE_BIT,
    BatchScan,
    scan_batches,
)
from seglake.record.codecs import (
    MAX_BLOCK_OUTPUT,
    Inflater,
    OutputLimitError,
    inflate_budget,
)
from seglake.record.schema import HEADER_TYPE, HEADERS_TYPE, RECORD_SCHEMA, empty_records
from seglake.record.varint import MAX_VARINT_BYTES, MAX_VARLONG_BYTES, decode_varint, read_varints

MIN_RECORD_BODY = 6  # attributes, timestampDelta, offsetDelta, keyLength, valueLength, headerCount
MIN_RECORD_SIZE = 1 + MIN_RECORD_BODY  # plus the length varint
MIN_HEADER_SIZE = 2  # keyLength, valueLength
MAX_BATCH_OUTPUT = MAX_BLOCK_OUTPUT  # refuse a records block that inflates beyond this
# below this many chains still running, one numpy step costs more than walking them in Python
PYTHON_WALK_BELOW = 48
_INLINE = 12  # binary_view keeps values of up to 12 bytes inside the view
_MAX_BINARY = (1 << 31) - 1  # bytes of one pa.binary() chunk
_WINDOW = 1 << 30  # binary_view offsets are int32: data beyond 2 GiB is cut into windows
_LE_U32 = np.dtype("<u4")
# _INLINE_MASKS[k]: keeps the first k of 12 inline bytes (as three int32), zeroes the rest
_INLINE_MASKS = (
    (np.arange(_INLINE)[None, :] < np.arange(_INLINE + 1)[:, None])
    .astype(np.uint8)
    .__mul__(0xFF)
    .view(np.int32)
)
_U32_ONE = np.uint32(1)
_U32_STOP_BITS = np.uint32(0x80808080)
_U32_GROUPS = [np.uint32(0x7F << (7 * k)) for k in range(4)]


def read_log(
    buf: bytes | bytearray | memoryview,
    *,
    path: str | None = None,
    skip_control: bool = True,
    verify_crc: bool = True,
) -> tuple[pa.Table, BatchScan]:
    """Scan and decode a whole ``.log`` buffer: ``(records, scan)``.

    A truncated or corrupt tail is not an error: the scan stops there (``scan.valid_bytes``,
    ``scan.error``) and only the batches before it are decoded.
    """
    scan = scan_batches(buf, verify_crc=verify_crc)
    return decode_batches(buf, scan, skip_control=skip_control, path=path), scan


def decode_batch(
    buf: bytes | bytearray | memoryview,
    position: int = 0,
    *,
    path: str | None = None,
    skip_control: bool = False,
    verify_crc: bool = True,
) -> pa.Table:
    """Records of the single batch at byte ``position`` of ``buf``.

    Raises :class:`CorruptRecordError` if no whole, valid batch starts there.
    """
    scan = scan_batches(buf, start=position, max_batches=1, verify_crc=verify_crc)
    if not len(scan):
        raise CorruptRecordError(f"no valid batch: {scan.error}", path=path, position=position)
    return decode_batches(buf, scan, skip_control=skip_control, path=path)


def decode_batches(
    buf: bytes | bytearray | memoryview,
    scan: BatchScan,
    *,
    skip_control: bool = True,
    path: str | None = None,
    max_batch_bytes: int = MAX_BATCH_OUTPUT,
    max_decompressed_bytes: int | None = None,
) -> pa.Table:
    """One row per record of the batches of ``scan`` (found in ``buf``), in file order.

    Columns are exactly :data:`RECORD_SCHEMA`. Control batches (transaction markers) are
    left out when ``skip_control``. Batches are decoded whether or not ``scan.crc_valid``
    says their CRC matched.

    Decompression is bounded: one records block inflates to at most ``max_batch_bytes``,
    all of them together to at most ``max_decompressed_bytes`` (default
    :func:`~seglake.record.codecs.inflate_budget` of their compressed size: 256x, at
    least 16 MiB). A batch past either raises :class:`CorruptRecordError`.
    """
    data = np.frombuffer(memoryview(buf).cast("B"), dtype=np.uint8)
    sel = np.flatnonzero(~scan.is_control) if skip_control else np.arange(len(scan))
    if not len(sel):
        return empty_records()
    position = scan.position[sel]
    end = position + scan.size[sel]
    if int(position.min()) < 0 or int(end.max()) > len(data):
        raise CorruptRecordError(
            f"scan describes batches up to byte {int(end.max())}, the buffer has {len(data)}",
            path=path,
        )
    counts = scan.records_count[sel]
    ctx = _Context(path, position, scan.base_offset[sel], counts)
    data, start, end = _record_blocks(
        data,
        position + HEADER_SIZE,
        end,
        scan.attributes[sel] & CODEC_MASK,
        ctx,
        (max_batch_bytes, max_decompressed_bytes),
    )
    too_many = counts > (end - start) // MIN_RECORD_SIZE
    if too_many.any():
        b = int(np.argmax(too_many))
        raise ctx.error(
            b,
            f"records count {int(counts[b])} cannot fit in a records block of "
            f"{int(end[b] - start[b])} bytes (a record takes at least {MIN_RECORD_SIZE})",
        )
    # only now that the counts are bounded by the bytes: one entry per record
    ctx.rec_batch = np.repeat(np.arange(len(sel)), counts)
    ctx.rec_base = np.concatenate(([0], np.cumsum(counts)[:-1]))
    body, rec_end = _walk_records(data, start, end, ctx)
    rec_batch = ctx.rec_batch
    f = _read_fields(data, body, rec_end, ctx)

    offset_delta = f["offset_delta"]
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

    attrs = scan.attributes[sel]
    log_append = (attrs & TIMESTAMP_TYPE_BIT) != 0
    timestamp = scan.base_timestamp[sel][rec_batch] + f["timestamp_delta"]
    if log_append.any():
        lat = log_append[rec_batch]
        timestamp[lat] = scan.max_timestamp[sel][rec_batch][lat]
    columns = [
        pa.array(scan.base_offset[sel][rec_batch] + offset_delta),
        pa.array(timestamp),
        pa.array(log_append.astype(np.int32)[rec_batch]),
        _binary(data, f["key_pos"], f["key_len"]),
        _binary(data, f["value_pos"], f["value_len"]),
        _headers(data, f["header_pos"], f["header_count"], rec_end, ctx),
        pa.array(scan.producer_id[sel][rec_batch]),
        pa.array(scan.is_transactional[sel][rec_batch]),
    ]
    return pa.Table.from_arrays(columns, schema=RECORD_SCHEMA)


@dataclasses.dataclass
class _Context:
    """Where the selected batches are, to name them in errors."""

    path: str | None
    position: np.ndarray  # file position of each selected batch
    base_offset: np.ndarray
    counts: np.ndarray
    # set once the counts are checked: batch of each record, first record of each batch
    rec_batch: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    rec_base: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))

    def error(self, b: int, message: str) -> CorruptRecordError:
        return CorruptRecordError(
            f"batch with base offset {int(self.base_offset[b])}: {message}",
            path=self.path,
            position=int(self.position[b]),
        )

    def record_error(self, i: int, message: str) -> CorruptRecordError:
        b = int(self.rec_batch[i])
        k = i - int(self.rec_base[b])
        return self.error(b, f"record {k} of {int(self.counts[b])}: {message}")

    def check(self, bad: np.ndarray, message: Callable[[int], str]) -> None:
        """Raise for the first record ``i`` where ``bad[i]``, saying ``message(i)``."""
        if bad.any():
            i = int(np.argmax(bad))
            raise self.record_error(i, message(i))


def _varints(
    data: np.ndarray,
    pos: np.ndarray,
    max_bytes: int,
    what: str,
    fail: Callable[[int, str], CorruptRecordError],
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`fast_varints`, with errors re-raised naming the batch and record."""
    try:
        return fast_varints(data, pos, max_bytes)
    except CorruptRecordError as exc:
        j = int(np.argmax(pos == exc.position)) if exc.position is not None else 0
        reason = str(exc).split(": ", 1)[-1]
        raise fail(j, f"{what}: {reason}") from None


def fast_varints(
    data: np.ndarray, pos: np.ndarray, max_bytes: int = MAX_VARLONG_BYTES
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`read_varints` (same result and errors), about 3x faster for short varints.

    Varints of up to 4 bytes (values of up to 27 bits: lengths, deltas, counts) are decoded
    from one unaligned little-endian uint32 gathered at each position; the rest (longer
    ones, and those within 3 bytes of the end of ``data``) go to :func:`read_varints`.
    """
    span = len(data)
    if span < 4 or not len(pos) or max_bytes < 4:
        return read_varints(data, pos, max_bytes)
    words = np.ndarray((span - 3,), _LE_U32, buffer=data, strides=(1,))
    w = words[np.minimum(pos, span - 4)]
    stop = ~w & _U32_STOP_BITS
    first = stop & (~stop + _U32_ONE)  # 0x80 << 8 * (size - 1): the last byte's clear high bit
    w &= (first << _U32_ONE) - _U32_ONE
    z = w & _U32_GROUPS[0]
    for k in range(1, 4):
        z |= (w >> np.uint32(k)) & _U32_GROUPS[k]
    values = ((z >> _U32_ONE) ^ (np.uint32(0) - (z & _U32_ONE))).view(np.int32).astype(np.int64)
    sizes = ((np.bitwise_count(first - _U32_ONE) + 1) >> 3).astype(np.int64)
    slow = np.flatnonzero((first == 0) | (pos > span - 4))
    if len(slow):
        values[slow], sizes[slow] = read_varints(data, pos[slow], max_bytes)
    return values, sizes


def _record_blocks(
    data: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    codec: np.ndarray,
    ctx: _Context,
    limits: tuple[int, int | None],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(data, start, end)``: the records block of each batch is ``data[start:end]``.

    Without compression that is the file buffer itself (no copy); otherwise the blocks,
    decompressed where needed, are joined into one buffer. ``limits``: bytes one block,
    and all blocks together (``None``: :func:`inflate_budget`), may decompress to.
    """
    packed = (codec != 0) & (end > start)
    if not packed.any():
        return data, start, end
    max_block, budget = limits
    if budget is None:
        budget = inflate_budget(int((end - start)[packed].sum()))
    view = memoryview(data)
    out = Inflater()
    sizes = np.empty(len(start), dtype=np.int64)
    left = budget
    for b, (a, z, c) in enumerate(zip(start.tolist(), end.tolist(), codec.tolist(), strict=True)):
        if not (c and z > a):
            sizes[b] = out.append_raw(view[a:z])
            continue
        limit = min(max_block, left)
        try:
            sizes[b] = out.append(c, view[a:z], limit)
        except OutputLimitError as exc:
            why = (
                "max_batch_bytes"
                if limit == max_block
                else f"what is left of the {budget}-byte budget of this read"
            )
            raise ctx.error(b, f"records block: {exc} ({why})") from None
        except CorruptRecordError as exc:
            raise ctx.error(b, f"records block: {exc}") from None
        left -= int(sizes[b])
    new_end = np.cumsum(sizes)
    return out.data, new_end - sizes, new_end


def _walk_records(
    data: np.ndarray, start: np.ndarray, end: np.ndarray, ctx: _Context
) -> tuple[np.ndarray, np.ndarray]:
    """Follow each batch's record length chain: ``(body, end)`` of every record.

    ``body`` is where a record's attributes byte is, ``end`` one past its last byte.
    Records come out batch by batch, in order.
    """
    counts, rec_base = ctx.counts, ctx.rec_base
    total = int(counts.sum())
    body = np.empty(total, dtype=np.int64)
    rec_end = np.empty(total, dtype=np.int64)
    active = np.flatnonzero(counts > 0)
    empty = (counts == 0) & (end > start)
    if empty.any():
        b = int(np.argmax(empty))
        raise ctx.error(
            b, f"records count is 0 but the records block has {int(end[b] - start[b])} bytes"
        )
    pos = start[active]
    limit = end[active]
    k = 0
    while len(active) >= max(PYTHON_WALK_BELOW, 1):
        short = pos >= limit
        if short.any():
            b = int(active[np.argmax(short)])
            raise ctx.error(
                b, f"records block holds only {k} records, the header says {int(counts[b])}"
            )
        lens, sizes = _varints(
            data,
            pos,
            MAX_VARINT_BYTES,
            "record length",
            lambda j, m, a=active, k=k: ctx.error(int(a[j]), f"record {k}: {m}"),
        )
        first = pos + sizes
        last = first + lens
        bad = (lens < MIN_RECORD_BODY) | (last > limit)
        if bad.any():
            j = int(np.argmax(bad))
            raise ctx.error(
                int(active[j]), _length_message(k, int(lens[j]), int(limit[j] - first[j]))
            )
        idx = rec_base[active] + k
        body[idx] = first
        rec_end[idx] = last
        pos = last
        k += 1
        done = counts[active] <= k
        if done.any():
            trailing = done & (pos != limit)
            if trailing.any():
                j = int(np.argmax(trailing))
                raise ctx.error(
                    int(active[j]), f"{int(limit[j] - pos[j])} bytes follow the last of {k} records"
                )
            keep = ~done
            active, pos, limit = active[keep], pos[keep], limit[keep]
    view = memoryview(data)
    for b, p, lim in zip(active.tolist(), pos.tolist(), limit.tolist(), strict=True):
        n = int(counts[b])
        firsts, lasts = _walk_one(view, p, lim, k, n, lambda m, b=b: ctx.error(b, m))
        base = int(rec_base[b])
        body[base + k : base + n] = firsts
        rec_end[base + k : base + n] = lasts
    return body, rec_end


def _walk_one(
    view: memoryview, p: int, limit: int, k: int, n: int, fail: Callable[[str], CorruptRecordError]
) -> tuple[list[int], list[int]]:
    """Records ``k..n-1`` of one batch in Python: ``(bodies, ends)``."""
    firsts: list[int] = []
    lasts: list[int] = []
    for r in range(k, n):
        if p >= limit:
            raise fail(f"records block holds only {r} records, the header says {n}")
        c = view[p]
        if c < 0x80:
            length, p = (c >> 1) ^ -(c & 1), p + 1
        else:
            try:
                length, p = decode_varint(view, p, MAX_VARINT_BYTES)
            except CorruptRecordError as exc:
                raise fail(f"record {r}: record length: {str(exc).split(': ', 1)[-1]}") from None
        if length < MIN_RECORD_BODY or p + length > limit:
            raise fail(_length_message(r, length, limit - p))
        firsts.append(p)
        p += length
        lasts.append(p)
    if p != limit:
        raise fail(f"{limit - p} bytes follow the last of {n} records")
    return firsts, lasts


def _length_message(k: int, length: int, remaining: int) -> str:
    return (
        f"record {k}: length {length} is invalid ({remaining} bytes remain in the "
        f"records block, a record body takes at least {MIN_RECORD_BODY})"
    )


def _read_fields(
    data: np.ndarray, body: np.ndarray, end: np.ndarray, ctx: _Context
) -> dict[str, np.ndarray]:
    """Timestamp/offset deltas, key/value positions and lengths, header counts."""
    out: dict[str, np.ndarray] = {}
    p = body + 1  # attributes: unused

    def varint(name: str, max_bytes: int, follows: str) -> np.ndarray:
        """Read field ``name``; the record must still hold ``follows`` after it."""
        nonlocal p
        values, sizes = _varints(data, p, max_bytes, name, ctx.record_error)
        p = p + sizes
        ctx.check(
            p >= end,
            lambda i: f"the record ({int(end[i] - body[i])} bytes) ends before its {follows}",
        )
        return values

    out["timestamp_delta"] = varint("timestamp delta", MAX_VARLONG_BYTES, "offset delta")
    out["offset_delta"] = varint("offset delta", MAX_VARINT_BYTES, "key length")
    for name, follows in (("key", "value length"), ("value", "header count")):
        length = varint(f"{name} length", MAX_VARINT_BYTES, follows)
        start = p
        p = p + np.maximum(length, 0)
        ctx.check(length < -1, lambda i, n=name, v=length: f"{n} length {int(v[i])} is negative")
        ctx.check(
            p >= end,
            lambda i, n=name, v=length, f=follows, s=start: (
                f"{n} length {int(v[i])} leaves no room for the {f} ({int(end[i] - s[i])} bytes "
                f"remain in the record)"
            ),
        )
        out[f"{name}_pos"] = start
        out[f"{name}_len"] = length
    count, sizes = _varints(data, p, MAX_VARINT_BYTES, "header count", ctx.record_error)
    p = p + sizes
    ctx.check(
        (count < 0) | (count * MIN_HEADER_SIZE > end - p),
        lambda i: (
            f"header count {int(count[i])} is invalid ({int(end[i] - p[i])} bytes remain in the "
            f"record)"
        ),
    )
    out["header_pos"] = p
    out["header_count"] = count
    return out


def _headers(
    data: np.ndarray, pos: np.ndarray, count: np.ndarray, end: np.ndarray, ctx: _Context
) -> pa.Array:
    """The ``headers`` column: walks each record's headers, checks the record ends there."""
    n = len(count)
    if not count.any():
        ctx.check(pos != end, lambda i: f"{int(end[i] - pos[i])} bytes follow the headers")
        offsets = pa.array(np.zeros(n + 1, dtype=np.int32))
        return pa.ListArray.from_arrays(
            offsets,
            _header_structs(pa.array([], pa.binary()), pa.array([], pa.binary())),
            type=HEADERS_TYPE,
        )
    none = count == 0
    ctx.check(none & (pos != end), lambda i: f"{int(end[i] - pos[i])} bytes follow the headers")
    recs = np.flatnonzero(~none)
    cnt = count[recs]
    base = np.concatenate(([0], np.cumsum(cnt)[:-1]))
    total = int(cnt.sum())
    if total > _MAX_BINARY:
        raise ctx.record_error(int(recs[0]), f"{total} headers are more than one column holds")
    key_pos, key_len, val_pos, val_len = (np.empty(total, dtype=np.int64) for _ in range(4))
    active = np.arange(len(recs))
    hp = pos[recs]
    lim = end[recs]
    j = 0
    while len(active) >= max(PYTHON_WALK_BELOW, 1):
        q = hp[active]
        e = lim[active]
        owner = recs[active]

        def fail(i: int, m: str, owner: np.ndarray = owner, j: int = j) -> CorruptRecordError:
            return ctx.record_error(int(owner[i]), f"header {j}: {m}")

        kl, s = _varints(data, q, MAX_VARINT_BYTES, "key length", fail)
        q = q + s
        kp = q
        q = q + kl
        bad = (kl < 0) | (q >= e)
        if bad.any():
            i = int(np.argmax(bad))
            raise fail(
                i,
                f"key length {int(kl[i])} is invalid ({int(e[i] - kp[i])} bytes "
                f"remain in the record)",
            )
        vl, s = _varints(data, q, MAX_VARINT_BYTES, "value length", fail)
        q = q + s
        vp = q
        q = q + np.maximum(vl, 0)
        bad = (vl < -1) | (q > e)
        if bad.any():
            i = int(np.argmax(bad))
            raise fail(
                i,
                f"value length {int(vl[i])} is invalid ({int(e[i] - vp[i])} bytes "
                f"remain in the record)",
            )
        idx = base[active] + j
        key_pos[idx], key_len[idx], val_pos[idx], val_len[idx] = kp, kl, vp, vl
        hp[active] = q
        j += 1
        done = cnt[active] <= j
        bad = np.where(done, q != e, q >= e)
        if bad.any():
            i = int(np.argmax(bad))
            raise fail(
                i,
                f"{int(e[i] - q[i])} bytes follow the last header"
                if done[i]
                else "the record ends before its next header",
            )
        active = active[~done]
    view = memoryview(data)
    for a in active.tolist():
        r = int(recs[a])
        b0 = int(base[a])
        q, e = int(hp[a]), int(lim[a])
        for h in range(j, int(cnt[a])):

            def fail(m: str, r: int = r, h: int = h) -> CorruptRecordError:
                return ctx.record_error(r, f"header {h}: {m}")

            kl, q = _scalar_varint(view, q, e, "key length", fail)
            if kl < 0 or q + kl >= e:
                raise fail(f"key length {kl} is invalid ({e - q} bytes remain in the record)")
            key_pos[b0 + h], key_len[b0 + h] = q, kl
            q += kl
            vl, q = _scalar_varint(view, q, e, "value length", fail)
            if vl < -1 or q + max(vl, 0) > e:
                raise fail(f"value length {vl} is invalid ({e - q} bytes remain in the record)")
            val_pos[b0 + h], val_len[b0 + h] = q, vl
            q += max(vl, 0)
        if q != e:
            raise ctx.record_error(r, f"{e - q} bytes follow the last header")
    keys = _binary(data, key_pos, key_len)
    try:
        keys = keys.cast(pa.string())
    except pa.ArrowInvalid:
        i = _first_bad_utf8(keys)
        owner = int(recs[np.searchsorted(base, i, side="right") - 1])
        raise ctx.record_error(owner, "a header key is not valid UTF-8") from None
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(count, out=offsets[1:])
    return pa.ListArray.from_arrays(
        pa.array(offsets), _header_structs(keys, _binary(data, val_pos, val_len)), type=HEADERS_TYPE
    )


def _header_structs(
    keys: pa.Array | pa.ChunkedArray, values: pa.Array | pa.ChunkedArray
) -> pa.StructArray:
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    return pa.StructArray.from_arrays([keys.cast(pa.string()), values], fields=list(HEADER_TYPE))


def _first_bad_utf8(keys: pa.Array | pa.ChunkedArray) -> int:
    for i, k in enumerate(keys.to_pylist()):
        try:
            k.decode("utf-8")
        except UnicodeDecodeError:
            return i
    return 0


def _scalar_varint(
    view: memoryview, p: int, end: int, what: str, fail: Callable[[str], CorruptRecordError]
) -> tuple[int, int]:
    if p >= end:
        raise fail(f"{what} runs past the record end")
    try:
        return decode_varint(view, p, MAX_VARINT_BYTES)
    except CorruptRecordError as exc:
        raise fail(f"{what}: {str(exc).split(': ', 1)[-1]}") from None


def _binary(data: np.ndarray, pos: np.ndarray, length: np.ndarray) -> pa.Array | pa.ChunkedArray:
    """``pa.binary()`` of ``data[pos[i]:pos[i] + length[i]]``, null where ``length < 0``.

    Builds a ``binary_view`` array over ``data`` (16-byte views: int32 length, then the
    bytes inline if <= 12, else a 4-byte prefix, int32 buffer index and int32 offset) and
    lets Arrow cast it, which copies each value once. Over 2 GiB comes back chunked.
    """
    n = len(pos)
    valid = length >= 0
    all_valid = bool(valid.all())
    size = length if all_valid else np.where(valid, length, 0)
    views = np.empty((n, 4), dtype=np.int32)
    views[:, 0] = size
    span = len(data)
    buffers = [pa.py_buffer(data)]
    is_long = size > _INLINE
    n_long = int(np.count_nonzero(is_long))
    long_ = slice(None) if n_long == n else np.flatnonzero(is_long)
    short = slice(None) if n_long == 0 else np.flatnonzero(~is_long)
    if n_long:
        lp = pos[long_]
        views[long_, 1] = np.ndarray((span - 3,), np.int32, buffer=data, strides=(1,))[lp]
        if span > _MAX_BINARY:
            widest = int(size[long_].max())
            if widest > _WINDOW:
                raise CorruptRecordError(
                    f"a key, value or header of {widest} bytes is larger "
                    f"than seglake supports ({_WINDOW})"
                )
            buffers = [
                pa.py_buffer(data[a : a + _WINDOW + widest]) for a in range(0, span, _WINDOW)
            ]
            views[long_, 2] = lp // _WINDOW
            views[long_, 3] = lp % _WINDOW
        else:
            views[long_, 2] = 0
            views[long_, 3] = lp
    if n_long < n:
        sp = pos[short]
        near = sp > span - _INLINE
        inline = _windows(data, _INLINE)[np.minimum(sp, max(span - _INLINE, 0))]
        inline = inline.view(np.int32).reshape(-1, 3)
        if near.any():  # within 12 bytes of the end of data: gather byte by byte
            idx = np.minimum(sp[near, None] + np.arange(_INLINE), span - 1)
            inline[near] = data[idx].view(np.int32)
        inline &= _INLINE_MASKS[size[short]]
        views[short, 1:] = inline
    validity = None if all_valid else pa.py_buffer(np.packbits(valid, bitorder="little"))
    views_array = pa.Array.from_buffers(
        pa.binary_view(), n, [validity, pa.py_buffer(views), *buffers]
    )
    total = int(size.sum())
    if total <= _MAX_BINARY:
        return views_array.cast(pa.binary())
    chunks, start, ends = [], 0, np.cumsum(size)
    while start < n:
        done_before = int(ends[start - 1]) if start else 0
        stop = max(int(np.searchsorted(ends, done_before + _MAX_BINARY, side="right")), start + 1)
        chunks.append(views_array.slice(start, stop - start).cast(pa.binary()))
        start = stop
    return pa.chunked_array(chunks, pa.binary())


def _windows(data: np.ndarray, width: int) -> np.ndarray:
    """Overlapping ``width``-byte windows of ``data``: ``[i]`` is ``data[i:i + width]``."""
    if len(data) < width:
        data = np.concatenate((data, np.zeros(width - len(data), dtype=np.uint8)))
    return np.ndarray(
        (len(data) - width + 1,), np.dtype((np.void, width)), buffer=data, strides=(1,)
    )
