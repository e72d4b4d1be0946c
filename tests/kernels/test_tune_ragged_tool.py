"""``tools/tune_ragged.py`` times the ragged split against the static launch (CPU: the
launches it compares and the extra-CTA counts)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from gvr_kernels.spec import H200

sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))

from tune_ragged import extra_ctas, parse_extras, routes  # noqa: E402


def test_parse_extras():
    assert parse_extras("8,32,fill") == [8, 32, "fill"]
    with pytest.raises(ValueError):
        parse_extras("8,many")


def test_extra_ctas_fill_one_wave_and_stay_below_the_rows():
    s = H200.sm_count
    assert extra_ctas(H200, 256, "fill") == 2 * s - 256
    assert 256 + extra_ctas(H200, 256, "fill") == 2 * s
    assert extra_ctas(H200, 2 * s, "fill") == 1  # no slot left: still a split
    assert extra_ctas(H200, 160, 500) == 159  # below the rows
    assert extra_ctas(H200, 512, 500) == 2 * s  # the workspace's slots


def test_routes_past_the_sms_time_the_asked_extras():
    s = H200.sm_count
    single, parts, many, *extras = routes(H200, 256, 65536, 512)
    assert (parts, extras) == (1, [s, min(255, 2 * s)])  # below the rows
    assert (single.split, single.ragged, many.split, many.ragged) == (False, False, True, True)
    assert many.threads == single.threads == 512
    _, _, _, *extras = routes(H200, 256, 65536, 512, [8, "fill"])
    assert extras == [8, 2 * s - 256]
    # rows that fit half the SMs: the static split and its ragged copy, no extras asked
    got = routes(H200, 32, 262144, 512, [8])
    assert got is not None and len(got) == 4 and got[3] == 32 * (got[1] - 1)
