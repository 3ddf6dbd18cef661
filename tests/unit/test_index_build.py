"""``seglake index build``: the ``.keyindex`` of segments without a usable one written
again (missing, damaged), the same bytes the writer wrote, idempotent, no catalog commit."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from seglake.cli.main import main
from seglake.lake.catalog import Catalog
from tests.unit.test_api import append, records


def test_index_build_writes_missing_and_damaged_key_indexes_once(tmp_path: Path, capsys) -> None:
    root = tmp_path / "lake"
    root.mkdir()
    recs = records(0, 400, 1)
    keys = [None if i % 9 == 0 else f"c{i // 40}".encode() for i in range(400)]
    append(root, "c", 0, recs.set_column(2, "key", pa.array(keys, pa.binary())), "r1")
    append(root, "d", 0, records(0, 150, 2), "r2")
    files = sorted(root.glob("c-0/*.keyindex"))
    assert len(files) >= 3
    original = {f: f.read_bytes() for f in files}
    files[0].unlink()
    damaged = bytearray(original[files[1]])
    damaged[-1] ^= 1
    files[1].write_bytes(bytes(damaged))
    other = sorted(root.glob("d-0/*.keyindex"))[0]
    other.unlink()
    version = Catalog(str(root)).version()
    assert main(["index", "build", str(root), "c"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in out[:-1]] == [str(files[0]), str(files[1])]
    assert "(missing)" in out[0] and "CRC" in out[1].upper()
    assert (
        out[-1]
        == f"{len(files)} segment(s): 2 .keyindex written, {len(files) - 2} already usable, "
        "0 not built"
    )
    assert {f: f.read_bytes() for f in files} == original
    assert not other.exists()  # only the topics named
    assert main(["index", "build", str(root)]) == 0  # idempotent; every topic
    out = capsys.readouterr().out.splitlines()
    assert (
        len(out) == 2
        and out[0].startswith(f"written {other} ")
        and " 1 .keyindex written" in out[1]
    )
    assert main(["index", "build", str(root)]) == 0
    assert " 0 .keyindex written" in capsys.readouterr().out
    assert Catalog(str(root)).version() == version  # a sidecar: no catalog commit
    assert main(["index", "build", str(tmp_path)]) == 2  # not a lake: one line, exit 2
    assert "not a lake" in capsys.readouterr().err
