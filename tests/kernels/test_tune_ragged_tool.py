"""``tools/tune_ragged.py`` times the ragged split against the static launch (CPU: the
launches it compares and the extra-CTA counts)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from gvr_kernels.spec import H200

sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))

from tune_ragged import extra_ctas, parse_extras, routes  # noqa: E402

S = H200.sm_count


def test_parse_extras():
    assert parse_extras("8,32,fill") == [8, 32, "fill"]
    with pytest.raises(ValueError):
        parse_extras("8,many")


def test_extra_ctas_fill_one_wave():
    assert extra_ctas(H200, 256, "fill") == 2 * S - 256
    assert 64 + extra_ctas(H200, 64, "fill", below_rows=False) == 2 * S
    assert extra_ctas(H200, 2 * S, "fill") == 1  # no slot left: still a split
    assert extra_ctas(H200, 160, 500) == 159  # past the SMs: below the rows
    assert extra_ctas(H200, 64, 100, below_rows=False) == 100
    assert extra_ctas(H200, 512, 500) == 2 * S  # the workspace's slots


def test_past_the_sms_one_cta_a_row_against_its_ragged_splits():
    single, parts, alts = routes(H200, 256, 65536, 512)
    assert parts == 1 and (single.threads, single.split, single.ragged) == (512, False, False)
    assert [(label, extra) for label, _, extra in alts] == [
        (f"ragged p{S}", S), (f"ragged p{min(255, 2 * S)}", min(255, 2 * S))
    ]  # fmt: skip
    for _, cfg, _ in alts:
        assert cfg.split and cfg.ragged and cfg.threads == 512
    _, _, alts = routes(H200, 256, 65536, 512, [8, "fill"])
    assert [extra for _, _, extra in alts] == [8, 2 * S - 256]


def test_within_half_the_sms_the_static_split_and_the_512_thread_core():
    static, parts, alts = routes(H200, 64, 65536, 512)
    assert static.split and not static.ragged and parts >= 2
    assert [(label, extra) for label, _, extra in alts] == [("ragged", 64 * (parts - 1))]
    assert alts[0][1].ragged and alts[0][1].threads == static.threads
    _, _, alts = routes(H200, 64, 65536, 512, [32, "fill"])
    assert [(label, extra) for label, _, extra in alts][1:] == [
        ("r512 p32", 32), (f"r512 p{2 * S - 64}", 2 * S - 64)
    ]  # fmt: skip
    for _, cfg, _ in alts[1:]:
        assert cfg.split and cfg.ragged and cfg.threads == 512
    # no split routed and no extras asked: nothing to compare
    assert routes(H200, 100, 65536, 512) is None
