"""``tools/cold_code.py`` reads its cells as ``rows,n,K`` and refuses others (CPU)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))

from cold_code import CELLS, parse_cell  # noqa: E402


def test_parse_cell():
    assert parse_cell("1,4096,512") == (1, 4096, 512)
    assert [parse_cell(c)[1] for c in CELLS][:2] == [4096, 4096]
    for bad in ("1,4096", "1,4096,512,2", "a,4096,512", "0,4096,512", "1,512,512"):
        with pytest.raises(ValueError, match="cell"):
            parse_cell(bad)
