"""``tools/tune_register.py`` reads its ``--configs`` items into the register configurations
they name, and draws each cell's row lengths as ``--lengths`` says (CPU)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))

from gvr_kernels.register import RegisterConfig  # noqa: E402
from tune_register import candidates, parse_configs, row_lengths  # noqa: E402


def test_configs_read_as_their_names():
    got = parse_configs("256x4r4c2048,512x2r1c8192nb,512x8r1c8192ew,1024x4r1c8192w")
    names = [RegisterConfig(mode="decode", **kw).name for kw in got]
    assert names == [
        "register_decode_t256_v4_a2_c2048_r4",
        "register_decode_t512_v2_a2_c8192_r1_nobracket",
        "register_decode_t512_v8_a2_c8192_r1_early_walk",
        "register_decode_t1024_v4_a2_c8192_r1_walk",
    ]


def test_configs_that_hold_the_row():
    """Only the shapes that hold ``n`` scores, and not four times over, are timed."""
    cfgs = parse_configs("512x2r1c8192,512x8r1c8192ew,1024x4r1c8192w")
    held = [c.name for c in candidates([], cfgs, 16384, "float32")]
    assert held == [
        "register_decode_t512_v8_a2_c8192_r1_early_walk",
        "register_decode_t1024_v4_a2_c8192_r1_walk",
    ]


@pytest.mark.parametrize("bad", ["512x8", "512x8r1c8192we", "512x8r1c8192x"])
def test_unreadable_items_stop(bad):
    with pytest.raises(SystemExit, match="cannot read"):
        parse_configs(bad)


def test_row_lengths_of_each_kind():
    b, n, k = 128, 16384, 512
    full = row_lengths("full", b, n, k)
    assert full.shape == (b,) and (full == n).all()
    short = row_lengths("short", b, n, k)
    assert short.shape == (b,) and short.min() > k and short.max() <= n // 8
    assert len(set(short.tolist())) > b // 2
    assert (row_lengths("short", b, n, k) == short).all()  # the same rows every run
    ragged = row_lengths("ragged", b, n, k)
    assert ragged.shape == (b,) and ragged.max() == n and ragged[-1] == n
    assert (ragged <= 4096).sum() >= b // 2  # most rows short
