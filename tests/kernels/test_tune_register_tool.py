"""``tools/tune_register.py`` reads its ``--configs`` items into the register configurations
they name (CPU)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))

from gvr_kernels.register import RegisterConfig  # noqa: E402
from tune_register import candidates, parse_configs  # noqa: E402


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
