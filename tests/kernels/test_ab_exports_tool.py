"""``tools/ab_exports.py`` parses its cells and builds and routes the cells it times (CPU)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))

from ab_exports import CELLS, parse_builds, parse_cells, parse_families, routes  # noqa: E402


def test_cells_parse_and_route():
    assert parse_cells(None) == CELLS
    assert parse_cells("1,262144,512;8,65536,2048") == ((1, 262144, 512), (8, 65536, 2048))
    for bad in ("1,2", "0,4096,512", "1,4096,4096"):
        with pytest.raises(ValueError):
            parse_cells(bad)
    got = routes(parse_cells("1,262144,2048;300,131072,2048"))
    assert got[0][3].parts > 1 and got[0][3].config.split  # a workspace split
    assert got[1][3].parts == 1 and got[1][3].config.threads == 512  # one CTA a row


def test_builds_parse():
    assert parse_builds(["old=a", "new=b/c"]) == [("old", "a"), ("new", "b/c")]
    for bad in (["old=a"], ["old=a", "old=b"], ["old", "new=b"], ["=a", "new=b"]):
        with pytest.raises(ValueError):
            parse_builds(bad)


def test_families_parse():
    assert parse_families("gaussian,dsa_like") == ["gaussian", "dsa_like"]
    for bad in ("", "gaussian,nope", ","):
        with pytest.raises(ValueError):
            parse_families(bad)
