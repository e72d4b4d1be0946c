"""``tools/tune_dense.py`` times the routed launch beside its dense variants (CPU: the variants)."""

from __future__ import annotations

import sys
from pathlib import Path

from gvr_kernels.spec import H200

sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))

from tune_dense import BANDS, DENSE, variants  # noqa: E402


def test_variants_are_the_routed_launch_and_its_dense_copies():
    for width, rows, k in [(32768, 8, 2048), (65536, 64, 2048), (262144, 256, 1024)]:
        got = variants(H200, rows, width, k)
        assert [label for label, _, _ in got] == ["routed"] + [f"d{d}" for d in DENSE]
        routed = got[0][1]
        assert routed.dense_min == 0
        for (_, cfg, parts), d in zip(got[1:], DENSE, strict=True):
            assert cfg.dense_min == d and parts == got[0][2]
            assert f"_d{d}" in cfg.name and cfg.name.replace(f"_d{d}", "") == routed.name


def test_cluster_cells_are_left_out():
    assert variants(H200, 1, 32768, 1024) == []


def test_bands_lie_past_two_k():
    assert all(n > 2 * k for _, _, k, n in BANDS)
