"""One operation, one way to name what it works on: ``recover`` and ``retention`` take
the lake positionally (as ``seglake recover LAKE``) or as ``--root LAKE`` (as the jobs),
in the CLI and in ``./spark-submit.sh`` alike (``jobargs.target_argument``)."""

from __future__ import annotations

import pytest

from seglake.cli import main as cli
from seglake.cli.jobargs import PARSERS

CLI_DEST = {"recover": "target", "retention": "root"}
RULES = {"recover": [], "retention": ["--retention-ms", "5"]}


def _cli(argv: list[str]):
    return cli._parser().parse_args(argv)


@pytest.mark.parametrize("op", ["recover", "retention"])
def test_both_forms_in_the_cli(op: str) -> None:
    given = _cli([op, "/data/lake", *RULES[op]])
    named = _cli([op, "--root", "/data/lake", *RULES[op]])
    assert getattr(given, CLI_DEST[op]) == getattr(named, CLI_DEST[op]) == "/data/lake"
    assert vars(given) == vars(named)


@pytest.mark.parametrize("op", ["recover", "retention"])
def test_both_forms_in_the_job(op: str) -> None:
    given = PARSERS[op]().parse_args(["/data/lake", *RULES[op]])
    named = PARSERS[op]().parse_args(["--root", "/data/lake", *RULES[op]])
    assert given.root == named.root == "/data/lake"
    assert vars(given) == vars(named)


@pytest.mark.parametrize("op", ["recover", "retention"])
@pytest.mark.parametrize("argv", [[], ["/a", "--root", "/b"]], ids=["neither", "both"])
def test_one_lake_exactly(op: str, argv: list[str], capsys) -> None:
    for prog, parse in (
        (f"seglake {op}", lambda a: _cli([op, *a])),
        (f"./spark-submit.sh {op}", lambda a: PARSERS[op]().parse_args(a)),
    ):
        with pytest.raises(SystemExit) as exc:
            parse([*argv, *RULES[op]])
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"{prog}: error: "), err
        assert ("required" if not argv else "given twice") in err[0]


def test_the_cli_recovers_a_lake_named_by_root(tmp_path, capsys) -> None:
    """The whole command, not only its parser: ``--root`` reaches the recovery."""
    missing = tmp_path / "nowhere"
    assert cli.main(["recover", "--root", str(missing), "--dry-run"]) == 2
    assert f"{missing}: no such directory" in capsys.readouterr().err
