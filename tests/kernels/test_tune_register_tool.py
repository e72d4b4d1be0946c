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


def test_stream_variants_launch_the_streaming_cores_on_the_cells_rows():
    """``--stream-variants``: the cell's streaming route with eight vectors a thread a tile,
    and the 512-thread core of one CTA a row (as gvr_2 runs b = 64 / 128, n = 16,384)."""
    from dataclasses import replace

    from gvr_kernels.spec import H200
    from tune_register import parse_stream_variants, stream_variants

    got = dict(stream_variants(H200, 64, 16384, 512, "float32", ["u8", "t512", "t512u8"]))
    assert list(got) == ["streaming u8", "streaming t512", "streaming t512u8"]
    u8, t512, t512u8 = got.values()
    assert (u8.config.threads, u8.config.unroll, u8.parts, u8.grid) == (1024, 8, 1, 64)
    assert (t512.config.threads, t512.config.unroll, t512.parts, t512.grid) == (512, 4, 1, 64)
    assert t512u8.config == replace(t512.config, unroll=8)
    assert not any(r.config.split for r in got.values())
    with pytest.raises(SystemExit, match="unknown"):
        parse_stream_variants("u8,u16")
