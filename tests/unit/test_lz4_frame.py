"""The LZ4 fast path (record/lz4_frame.py) against python-lz4's frames (an independent
encoder): every option Kafka clients may set, output byte for byte, the limit kept, and
the frames it does not take handed to the usual decoder."""

from __future__ import annotations

import lz4.frame as lf
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglake.record import codecs
from seglake.record.lz4_frame import inflate_frame


def payload(seed: int, n: int, alphabet: int) -> bytes:
    return np.random.default_rng(seed).integers(0, alphabet, n).astype(np.uint8).tobytes()


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    n=st.integers(0, 300_000),
    alphabet=st.sampled_from([1, 4, 40, 256]),
    block_size=st.sampled_from([lf.BLOCKSIZE_MAX64KB, lf.BLOCKSIZE_MAX256KB, lf.BLOCKSIZE_MAX1MB]),
    linked=st.booleans(),
    block_checksum=st.booleans(),
    content_checksum=st.booleans(),
    store_size=st.booleans(),
)
def test_frames_decompress_byte_for_byte_within_the_limit(
    seed, n, alphabet, block_size, linked, block_checksum, content_checksum, store_size
) -> None:
    data = payload(seed, n, alphabet)
    frame = lf.compress(
        data,
        block_size=block_size,
        block_linked=linked,
        block_checksum=block_checksum,
        content_checksum=content_checksum,
        store_size=store_size,
    )
    assert codecs.decompress(codecs.LZ4, frame) == data
    if n:
        with pytest.raises(codecs.OutputLimitError):
            codecs.decompress(codecs.LZ4, frame, max_output=n - 1)


def test_single_block_frames_take_the_fast_path() -> None:
    """Kafka's frames (one independent block, content checksum): decoded here, not by
    the frame decoder; frames it does not take return None."""
    data = payload(1, 16_000, 40)
    buf = np.zeros(1 << 20, dtype=np.uint8)
    for linked in (True, False):
        frame = lf.compress(data, block_linked=linked, content_checksum=True)
        assert inflate_frame(frame, lambda k: buf[:k], 1 << 20) == len(data)
        assert buf[: len(data)].tobytes() == data
    two = lf.compress(payload(2, 200_000, 40), block_linked=True)  # linked, many blocks
    assert inflate_frame(two, lambda k: buf[:k], 1 << 20) is None
    assert inflate_frame(two + b"\x00", lambda k: buf[:k], 1 << 20) is None  # trailing
    assert inflate_frame(b"\x04\x22\x4d\x18\x64\x40", lambda k: buf[:k], 1 << 20) is None
