"""seglake's lz4 records blocks are frames Kafka's Java reader takes.

The reader's rules are modelled from ``Lz4BlockInputStream`` (FLG: reserved bits 0,
blocks independent, version 1; BD: reserved bits 0, block size 4-7; HC: xxHash32 of the
descriptor; blocks at most the declared size), and the frames are read back by two
independent decoders (python-lz4's frame decoder, kafka-python's lz4 codec) and by
kafka-python's RecordBatch reader through the encoder.
"""

from __future__ import annotations

import cramjam
import lz4.block
import lz4.frame as lf
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.codec import lz4_decode

from seglake.record import codecs
from seglake.record.lz4_write import HEADER, compress_frame


class JavaReaderRefuses(Exception):
    pass


def kafka_java_read(frame: bytes) -> bytes:
    """A model of Kafka's ``Lz4BlockInputStream``: its header checks, then the blocks."""
    if frame[:4] != b"\x04\x22\x4d\x18":
        raise JavaReaderRefuses("magic")
    flg, bd = frame[4], frame[5]
    if flg & 0b11:
        raise JavaReaderRefuses("Reserved bits must be 0")
    if not flg & 0x20:
        raise JavaReaderRefuses("Dependent block stream is unsupported")
    if flg >> 6 != 1:
        raise JavaReaderRefuses("Version is unsupported")
    if bd & 0x8F or not 4 <= (bd >> 4) & 7 <= 7:
        raise JavaReaderRefuses("BD reserved / block size")
    pos = 7 + (8 if flg & 0x08 else 0)  # HC: checked against python-lz4's header below
    block_max = 1 << (2 * ((bd >> 4) & 7) + 8)
    out = bytearray()
    while True:
        size = int.from_bytes(frame[pos : pos + 4], "little")
        pos += 4
        if size == 0:
            break
        stored, size = size >> 31, size & 0x7FFFFFFF
        if size > block_max:
            raise JavaReaderRefuses("block larger than its maximum")
        data = frame[pos : pos + size]
        pos += size + (4 if flg & 0x10 else 0)
        out += data if stored else lz4.block.decompress(data, uncompressed_size=block_max)
    pos += 4 if flg & 0x04 else 0
    assert pos == len(frame), "bytes after the frame"
    return bytes(out)


def payload(seed: int, n: int, alphabet: int) -> bytes:
    return np.random.default_rng(seed).integers(0, alphabet, n).astype(np.uint8).tobytes()


def test_the_header_is_python_lz4s_for_kafkas_options() -> None:
    """Independent blocks of 64 KiB, no checksums, no content size: the HC byte too."""
    frame = lf.compress(
        b"x",
        block_size=lf.BLOCKSIZE_MAX64KB,
        block_linked=False,
        block_checksum=False,
        content_checksum=False,
        store_size=False,
    )
    assert frame[:7] == HEADER


def test_the_java_reader_model_refuses_linked_blocks() -> None:
    """The model can fail: the frames seglake wrote before (cramjam's, linked blocks)."""
    with pytest.raises(JavaReaderRefuses, match="Dependent"):
        kafka_java_read(bytes(cramjam.lz4.compress(payload(1, 1000, 4))))


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    n=st.one_of(st.integers(0, 300), st.integers(0, 300_000), st.sampled_from([65536, 131072])),
    alphabet=st.sampled_from([1, 4, 40, 256]),
    level=st.sampled_from([9, 1, 12, 17]),
)
def test_frames_read_back_by_every_reader(seed: int, n: int, alphabet: int, level: int) -> None:
    data = payload(seed, n, alphabet)
    frame = codecs.compress(codecs.LZ4, data, level)
    assert frame[:7] == HEADER and frame.endswith(b"\x00\x00\x00\x00")
    assert kafka_java_read(frame) == data
    assert lf.decompress(frame) == data
    assert lz4_decode(frame) == data
    assert codecs.decompress(codecs.LZ4, frame) == data


def test_kafkas_compressor_rule() -> None:
    """Level 9 (Kafka's default): the fast compressor's blocks; other levels: LZ4 HC's;
    a block that does not shrink is stored with the high bit of its size set."""
    rng = np.random.default_rng(7)
    words = [payload(i, int(rng.integers(3, 9)), 26) for i in range(300)]
    text = b" ".join(words[i] for i in rng.integers(0, 300, 40_000))[:200_000]
    for level, kw in ((9, {}), (12, {"mode": "high_compression", "compression": 12})):
        frame = compress_frame(text, level)
        blocks = []
        for start in range(0, len(text), 65536):
            blocks.append(lz4.block.compress(text[start : start + 65536], store_size=False, **kw))
        want = HEADER + b"".join(len(b).to_bytes(4, "little") + b for b in blocks) + bytes(4)
        assert frame == want, level
    assert compress_frame(text, 12) != compress_frame(text, 9)
    noise = payload(8, 70_000, 256)
    frame = compress_frame(noise)
    assert frame[7:11] == (65536 | 0x80000000).to_bytes(4, "little")
    assert frame[11 : 11 + 65536] == noise[:65536]
    assert compress_frame(b"") == HEADER + bytes(4)  # Kafka writes no block for no bytes
