"""The compiled kernel's lz4 decompression (``sl_inflate``, :mod:`seglake.record.inflate_native`)
against python-lz4 (the reference C library) and against seglake's Python path (which
stays the fallback): the same bytes for every frame an LZ4 compressor writes; for forged
blocks (mutated, truncated, extended), either refused or python-lz4's very output; the
same records blocks, limits and errors from ``record_blocks`` whichever path runs; and,
under AddressSanitizer, no read or write outside the buffers on forged input."""

from __future__ import annotations

import textwrap
from pathlib import Path
from unittest.mock import patch

import lz4.block
import lz4.frame as lf
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglake.errors import SeglakeError
from seglake.record import codecs, native
from seglake.record.batch_walk import record_blocks
from seglake.record.codecs import Inflater
from seglake.record.inflate_native import inflate_run, sources
from seglake.record.walk import BatchContext
from tests.unit.asan import run_under_asan

LIB = native.kernel()
needs_kernel = pytest.mark.skipif(LIB is None, reason="seglake_native is not built (make venv)")
HYPO = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ROOT = Path(__file__).resolve().parents[2]
BD = {64 << 10: 4, 256 << 10: 5, 1 << 20: 6, 4 << 20: 7}


def payload(seed: int, n: int, alphabet: int) -> bytes:
    """Random bytes of a small alphabet, with repeats (so that matches overlap)."""
    rng = np.random.default_rng(seed)
    data = rng.integers(0, alphabet, n).astype(np.uint8)
    for _ in range(n // 500):
        a, k = rng.integers(0, n), rng.integers(1, 300)
        data[a : a + k] = data[max(0, a - rng.integers(1, 20))]
    return data.tobytes()


def frame_of(blocks: list[bytes], block_max: int = 64 << 10, stored: bool = False) -> bytes:
    """An LZ4 frame (independent blocks, no checksums) of raw ``blocks``."""
    out = bytearray(b"\x04\x22\x4d\x18\x60" + bytes([BD[block_max] << 4]) + b"\x00")
    for b in blocks:
        out += (len(b) | (1 << 31 if stored else 0)).to_bytes(4, "little") + b
    return bytes(out + b"\x00\x00\x00\x00")


def kernel_inflate(frame: bytes, limit: int = 1 << 30) -> bytes | None:
    """The kernel's output for one lz4 block, or None where it leaves it to Python."""
    out, sizes = Inflater(), np.zeros(1, np.int64)
    arr = np.frombuffer(frame, np.uint8)
    b, _ = inflate_run(
        LIB,
        out,
        sources((arr, np.array([0]), np.array([len(arr)]))),
        np.array([3]),
        0,
        limit,
        limit,
        sizes,
    )
    return out.data.tobytes() if b == 1 else None


def reference(block: bytes, block_max: int) -> bytes | None:
    try:
        return lz4.block.decompress(block, uncompressed_size=block_max)
    except lz4.block.LZ4BlockError:
        return None


@needs_kernel
@HYPO
@given(
    seed=st.integers(0, 2**16),
    n=st.integers(0, 300_000),
    alphabet=st.sampled_from([1, 2, 4, 40, 256]),
    block_size=st.sampled_from([lf.BLOCKSIZE_MAX64KB, lf.BLOCKSIZE_MAX256KB, lf.BLOCKSIZE_MAX4MB]),
    level=st.sampled_from([0, 1, 9, 16]),
    block_checksum=st.booleans(),
    content_checksum=st.booleans(),
    store_size=st.booleans(),
)
def test_frames_decode_byte_for_byte(
    seed, n, alphabet, block_size, level, block_checksum, content_checksum, store_size
) -> None:
    """python-lz4's frames (fast and HC compressors, every option Kafka clients may set)."""
    data = payload(seed, n, alphabet)
    frame = lf.compress(
        data,
        compression_level=level,
        block_size=block_size,
        block_linked=False,
        block_checksum=block_checksum,
        content_checksum=content_checksum,
        store_size=store_size,
    )
    assert kernel_inflate(frame) == data
    if n:  # past its limit: left to Python (which names it)
        assert kernel_inflate(frame, n - 1) is None


@needs_kernel
@HYPO
@given(
    seed=st.integers(0, 2**16),
    n=st.integers(1, 70_000),
    alphabet=st.sampled_from([1, 3, 40, 256]),
    mode=st.sampled_from(["default", "fast", "high_compression"]),
    edits=st.lists(
        st.tuples(
            st.sampled_from(["set", "cut", "add", "drop"]),
            st.integers(0, 2**31),
            st.integers(0, 255),
        ),
        min_size=1,
        max_size=4,
    ),
)
def test_forged_blocks_are_refused_or_decode_as_python_lz4(seed, n, alphabet, mode, edits) -> None:
    """Mutated, truncated, extended blocks: what the kernel takes, python-lz4 decodes to
    the same bytes; the rest is left to the Python path."""
    data = payload(seed, min(n, 64 << 10), alphabet)
    block = bytearray(lz4.block.compress(data, mode=mode, store_size=False))
    assert kernel_inflate(frame_of([bytes(block)])) == data
    for op, at, value in edits:
        at %= len(block) + 1
        if op == "set" and at < len(block):
            block[at] = value
        elif op == "cut":
            del block[at:]
        elif op == "add":
            block[at:at] = bytes([value])
        elif op == "drop" and at < len(block):
            del block[at]
    got = kernel_inflate(frame_of([bytes(block)]))
    if got is not None:
        assert got == reference(bytes(block), 64 << 10)


@needs_kernel
def test_what_the_kernel_leaves_to_python() -> None:
    """Frames outside the plain case, and blocks breaking the format's end rules."""
    data = payload(1, 20_000, 40)
    block = lz4.block.compress(data, store_size=False)
    good = frame_of([block])
    assert kernel_inflate(good) == data
    assert kernel_inflate(frame_of([data[:5000]], stored=True)) == data[:5000]
    linked = lf.compress(payload(2, 200_000, 40), block_linked=True)
    refused = [
        linked,  # dependent blocks
        good + b"\x00",  # bytes after the frame
        good[:-1],  # no end mark
        good[:4] + bytes([good[4] | 1]) + good[5:],  # a dictionary id
        good[:4] + bytes([0xA0]) + good[5:],  # version 2
        good[:5] + b"\x30" + good[6:],  # block maximum 3
        frame_of([payload(3, 70_000, 256)], stored=True),  # a block past its maximum
        frame_of([block[:-1]]),  # the last literals cut
        frame_of([b"\x00\x01\x00"]),  # a match at offset 1 with nothing before it
        frame_of([b"\x10a\x00\x00"]),  # offset 0
        frame_of([b"\x40abcd\x04\x00\x00x"]),  # a match then a single literal
    ]
    for frame in refused:
        assert kernel_inflate(frame) is None, frame[:16]
    assert kernel_inflate(frame_of([b"\x00"])) == b""  # an empty block
    assert kernel_inflate(frame_of([])) == b""  # no blocks


def blocks_of(draw_codecs: list[int], seed: int) -> list[bytes]:
    out = []
    for i, c in enumerate(draw_codecs):
        data = payload(seed + i, (seed * 7919 + i * 104729) % 40_000, 1 + i % 50)
        out.append(codecs.compress(c, data) if c else data)
    return out


def record_blocks_both(blocks: list[bytes], codec: np.ndarray, limits, set_aside: bool):
    """``record_blocks`` with the kernel and without it: outcomes (bytes per block and
    ``ok``, or the error's type and message)."""
    buf = np.frombuffer(b"".join(blocks) or b"\x00", np.uint8)
    ends = np.cumsum([len(b) for b in blocks]).astype(np.int64)
    starts = ends - [len(b) for b in blocks]

    def run():
        ctx = BatchContext(
            "f.log", starts, np.zeros(len(blocks), np.int64), np.zeros(len(blocks), np.int64)
        )
        ok = np.ones(len(blocks), bool) if set_aside else None
        try:
            data, s, e = record_blocks((buf, starts, ends), codec, ctx, limits, ok)
        except SeglakeError as exc:
            return type(exc), str(exc)
        return [
            data[a:z].tobytes() for a, z in zip(s, e, strict=True)
        ], None if ok is None else ok.tolist()

    fast = run()
    with patch.object(native, "kernel", lambda: None):
        slow = run()
    return fast, slow


@needs_kernel
@HYPO
@given(
    codec=st.lists(st.sampled_from([0, 1, 2, 3, 3, 3, 4]), min_size=1, max_size=8),
    seed=st.integers(0, 2**16),
    max_block=st.sampled_from([1 << 30, 30_000, 5_000]),
    budget=st.sampled_from([None, 60_000, 10_000]),
    set_aside=st.booleans(),
    damage=st.integers(-1, 7),
)
def test_record_blocks_are_the_python_paths(
    codec, seed, max_block, budget, set_aside, damage
) -> None:
    """Mixed codecs (the kernel hands gzip, snappy and zstd to Python between its runs),
    limits per block and per read, a damaged block: the same blocks, set-aside flags and
    errors with and without the kernel."""
    blocks = blocks_of(codec, seed)
    if 0 <= damage < len(blocks) and len(blocks[damage]) > 12:
        b = bytearray(blocks[damage])
        b[len(b) // 2] ^= 0x5A
        blocks[damage] = bytes(b)
    fast, slow = record_blocks_both(
        blocks, np.array(codec, np.int64), (max_block, budget), set_aside
    )
    assert fast == slow


@needs_kernel
def test_growing_the_buffer_keeps_what_it_holds() -> None:
    """Blocks that inflate far past the first guess at the room (8x)."""
    blocks = [lf.compress(b"\x00" * 200_000, block_linked=False) for _ in range(6)]
    fast, slow = record_blocks_both(blocks, np.full(6, 3, np.int64), (1 << 30, None), False)
    assert fast == slow and fast[0] == [b"\x00" * 200_000] * 6


ASAN_RUN = textwrap.dedent(
    """
    import ctypes, sys, random
    import lz4.block
    so = ctypes.CDLL(sys.argv[1])
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    I, P = ctypes.c_int64, ctypes.c_void_p
    so.sl_inflate.restype = I
    so.sl_inflate.argtypes = [I, P, P, P, I, P, I, I, P, P]
    rng = random.Random(int(sys.argv[2]))

    def heap(data):  # exactly len(data) bytes: a read past them is caught
        p = libc.malloc(max(len(data), 1))
        ctypes.memmove(p, data, len(data))
        return p

    def run(frame, cap):
        src, out = heap(frame), libc.malloc(max(cap, 1))
        arrays = [(ctypes.c_int64 * 3)() for _ in range(4)]
        arrays[0][0], arrays[1][0], arrays[2][0] = src, len(frame), 3
        state = arrays[3]
        state[0], state[1] = 0, 1 << 40
        sizes = (ctypes.c_int64 * 1)()
        so.sl_inflate(1, arrays[0], arrays[1], arrays[2], 0, out, cap, 1 << 30, state, sizes)
        libc.free(src)
        libc.free(out)

    for i in range(int(sys.argv[3])):
        n = rng.randrange(1, 5000)
        data = bytes(rng.choice(b"ab\\x00xyz") for _ in range(n))
        block = bytearray(lz4.block.compress(data, store_size=False))
        for _ in range(rng.randrange(0, 4)):
            kind, at = rng.randrange(3), rng.randrange(len(block) + 1)
            if kind == 0 and at < len(block):
                block[at] = rng.randrange(256)
            elif kind == 1:
                del block[at:]
            else:
                block[at:at] = bytes([rng.randrange(256)])
        bd = rng.choice([0x40, 0x50])
        frame = (b"\\x04\\x22\\x4d\\x18\\x60" + bytes([bd]) + b"\\x00"
                 + len(block).to_bytes(4, "little") + bytes(block) + b"\\x00\\x00\\x00\\x00")
        for cut in (len(frame), rng.randrange(len(frame) + 1)):
            run(frame[:cut], rng.choice([0, n // 2, n, 64 << 10, 256 << 10]))
    print("clean")
    """
)


def test_no_out_of_bounds_access_under_address_sanitizer(tmp_path) -> None:
    """The kernel built with -fsanitize=address, fed forged frames in buffers of their
    exact sizes and outputs of every capacity: no access outside them (ASan aborts)."""
    out = run_under_asan(tmp_path, ASAN_RUN, "7", "3000")
    assert out.returncode == 0 and "clean" in out.stdout, out.stderr[-3000:]
