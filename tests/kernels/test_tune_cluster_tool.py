"""``tools/tune_cluster.py`` picks the real-row files by width from their headers (CPU)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))

from tune_cluster import SHAPES, _real_files, parse_shapes  # noqa: E402


def _write(path: Path, rows: int, width: int) -> None:
    logits = np.full((rows, width), -np.inf, dtype=np.float32)
    save_file({"logits": logits, "lengths": np.full(rows, width, np.int32)}, str(path))


def test_real_files_by_width(tmp_path):
    _write(tmp_path / "a.safetensors", 3, 32768)
    _write(tmp_path / "b.safetensors", 5, 131072)
    _write(tmp_path / "c.safetensors", 2, 8192)
    (tmp_path / "notes.md").write_text("not a row file")
    got = [(p.name, n, b) for p, n, b in _real_files(str(tmp_path), [32768, 131072])]
    assert got == [("a.safetensors", 32768, 3), ("b.safetensors", 131072, 5)]
    assert _real_files(str(tmp_path), [65536]) == []
    assert _real_files(None, [32768]) == []


def test_shapes_hold_their_row_length():
    # every cluster shape tried at a row length holds that many float32 scores
    for n, shapes in SHAPES.items():
        for cluster, threads, vecs in shapes:
            assert cluster * threads * vecs * 4 >= n, (n, cluster, threads, vecs)


def test_parse_shapes():
    assert parse_shapes("8x512x4,8x1024x2") == [(8, 512, 4), (8, 1024, 2)]
