"""The point reads' joined buffer grows without copying what it holds each round."""

from __future__ import annotations

import numpy as np
import pyarrow.fs as pafs

from seglake.storage.header_chains import Chains


def test_chains_join_keeps_every_read_in_order(tmp_path):
    blob = np.random.default_rng(1).integers(0, 256, 5000, dtype=np.uint8).tobytes()
    (tmp_path / "x.log").write_bytes(blob)
    chains = Chains()
    want = b""
    with pafs.LocalFileSystem().open_input_file(str(tmp_path / "x.log")) as f:
        for round_, ranges in enumerate([[(0, 100)], [(300, 900), (50, 60)], [(4000, 5000)]]):
            for start, end in ranges:
                assert chains.read(f, start, end, first=round_ == 0 and start == 0) >= 0
                want += blob[start:end]
            chains.join()
            assert chains.data.tobytes() == want
            at, room, _ = chains.headers(
                np.array([len(chains.bufs) - 1]), np.array([ranges[-1][0]])
            )
            assert int(at[0]) == len(want) - (ranges[-1][1] - ranges[-1][0])
            assert int(room[0]) == ranges[-1][1] - ranges[-1][0]
