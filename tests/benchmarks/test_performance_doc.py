"""CPU tests of ``benchmarks/make_performance_doc.py`` and ``benchmarks/plots.py`` on synthetic
benchmark results, with and without gvr_2 records."""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", BENCH_DIR / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


bt = _load("bench_topk")
doc = _load("make_performance_doc")
plots = _load("plots")

META = {
    "date": "2026-12-01T00:00:00+00:00",
    "device": "NVIDIA H200",
    "sm_count": 132,
    "torch": "2.11.0+cu130",
    "cuda": "13.0",
    "driver": "580",
    "cutlass_dsl": "4.8.1",
    "commit": "abc123",
}


def _rec(provider, us, **kw):
    base = dict(
        set="decode-grid",
        provider=provider,
        timing="eager",
        k=512,
        rows=1,
        n=4096,
        next_n=1,
        compress_ratio=1,
        family="gaussian",
        exact=True if us is not None else None,
    )
    base.update(kw)
    return bt.Record(median_us=us, **base)


def _result(with_gvr2: bool) -> dict:
    recs = []
    for set_name, timing in (("decode-grid", "eager"), ("graph", "graph")):
        for k in (512, 2048):
            for n in (4096, 65536):
                for b in (1, 8):
                    key = dict(set=set_name, timing=timing, k=k, rows=b, n=n)
                    cell = [_rec("gvr", 10.0, **key), _rec("torch", 25.0, **key)]
                    if with_gvr2:
                        cell.insert(1, _rec("gvr2", 8.0 if b == 1 else 12.5, **key))
                    bt.attach_ratios(cell)
                    recs += cell
    for fam in ("quantized", "nan"):
        key = dict(set="adversarial", family=fam, n=131072)
        cell = [_rec("gvr", 20.0, **key), _rec("torch", 40.0, **key)]
        if with_gvr2:
            if fam == "nan":
                g2 = _rec("gvr2", None, exact=False, note="inexact: 1 of 1 rows; not timed", **key)
            else:
                g2 = _rec("gvr2", 16.0, **key)
            cell.insert(1, g2)
        bt.attach_ratios(cell)
        recs += cell
    key = dict(set="prefill", rows=128, n=16384)
    cell = [_rec("gvr", 30.0, **key), _rec("torch", 90.0, **key)]
    if with_gvr2:
        cell.insert(1, _rec("gvr2", None, note="not applicable: prefill windows", **key))
    bt.attach_ratios(cell)
    recs += cell
    meta = dict(META)
    if with_gvr2:
        meta.update(
            flashinfer="0.7.2.post1",
            clocks=[
                {
                    "stage": "start",
                    "sm_mhz": 345.0,
                    "mem_mhz": 3201.0,
                    "max_sm_mhz": 1980.0,
                    "power_w": 75.0,
                    "temp_c": 30.0,
                },
                {"stage": "end", "error": "nvidia-smi not available"},
            ],
            warmup=[{"set": "decode-grid", "matmuls": 900, "seconds": 1.5}],
            notes=[bt.gvr2_note("0.7.2.post1", "NVIDIA H200", 9, 0)],
        )
    return {
        "metadata": meta,
        "summary": bt.summary(recs),
        "inexact_by_family": bt.inexact_by_family(recs),
        "records": [asdict(r) for r in recs],
        "failures": bt.claimed_failures(recs),
    }


def _write(tmp_path, name, res):
    p = tmp_path / f"{name}.json"
    p.write_text(json.dumps(res))
    return p


def test_doc_with_gvr2(tmp_path):
    p = _write(tmp_path, "bench", _result(True))
    out = tmp_path / "performance.md"
    doc.main([str(p), "--out", str(out)])
    text = out.read_text()
    assert "**K = 512** — GVR / gvr_2 / torch.topk us (GVR/gvr_2, x torch)" in text
    assert "| 1 | 10.0 / 8.0 / 25.0 (1.25, 2.50x) |" in text
    assert "10.0 / 12.5 / 25.0 (0.80, 2.50x)" in text
    assert "GVR takes 1.00x gvr_2's time (geomean; faster in 4 of 8 cells" in text
    assert "1.25x at b = 1, 0.80x at b = 8" in text
    assert "gvr_2: nan (1 cells)" in text
    assert "FlashInfer 0.7.2.post1" in text and "skip_check=True" in text
    assert "start: SM 345 MHz (max 1980 MHz)" in text and "end: nvidia-smi not available" in text
    # flat per-cell tables with a gvr_2 column and the ratio
    assert "| k | rows | n | family | GVR us | gvr_2 us | torch.topk us | GVR/gvr_2 |" in text
    assert "| 512 | 1 | 131072 | quantized | 20.0 | 16.0 | 40.0 | 1.25 | 2.00 |" in text
    assert "| 512 | 1 | 131072 | nan | 20.0 | inexact | 40.0 | - | 2.00 |" in text
    assert "| 512 | 128 | 16384 | 30.0 | n/a | 90.0 | - | 3.00 |" in text
    assert "gvr_2, 1 cell(s): not applicable: prefill windows" in text


def test_doc_without_gvr2_renders_as_before(tmp_path):
    p = _write(tmp_path, "bench", _result(False))
    text = doc.render(
        [("bench", {**json.loads(p.read_text()), "_dir": str(tmp_path), "_tag": "bench"})],
        doc_dir=tmp_path,
    )
    assert "**K = 512** — GVR us / torch.topk us (speedup)" in text
    assert "| 1 | 10.0 / 25.0 (2.50x) |" in text
    assert "gvr_2" not in text and "gvr2" not in text
    assert "| provider | k | rows | n | family | median_us |" in text
    assert "| gvr | 512 | 1 | 131072 | nan | 20.0 |" in text


def test_doc_includes_notes_and_plots(tmp_path):
    p = _write(tmp_path, "bench", _result(True))
    (tmp_path / "bench_speedup.png").write_bytes(b"")
    notes = tmp_path / "NOTES.md"
    notes.write_text("## Reading the numbers\n")
    out = tmp_path / "docs" / "performance.md"
    out.parent.mkdir()
    doc.main([str(p), "--out", str(out), "--notes", str(notes)])
    text = out.read_text()
    assert "## Reading the numbers" in text
    assert "![bench_speedup.png](../bench_speedup.png)" in text


def test_doc_names_results_by_folder_when_they_come_from_several(tmp_path):
    """Results of two devices (one folder each) keep their folder in the section name, and
    each folder's notes come in the order given."""
    h100, h200 = tmp_path / "h100", tmp_path / "h200"
    h100.mkdir()
    h200.mkdir()
    a, b = _write(h100, "bench", _result(True)), _write(h200, "bench", _result(True))
    (h100 / "NOTES.md").write_text("## Reading the H100 numbers\n")
    (h200 / "NOTES.md").write_text("## Reading the H200 numbers\n")
    out = tmp_path / "performance.md"
    notes = ["--notes", str(h100 / "NOTES.md"), "--notes", str(h200 / "NOTES.md")]
    doc.main([str(a), str(b), "--out", str(out), *notes])
    text = out.read_text()
    assert text.index("## Reading the H100 numbers") < text.index("## Reading the H200 numbers")
    assert text.index("## h100/bench\n") < text.index("## h200/bench\n")
    # one folder: the stem alone, as before
    doc.main([str(a), "--out", str(out)])
    assert "## bench\n" in out.read_text() and "h100/bench" not in out.read_text()


def test_gvr2_ratio_panel(tmp_path):
    pytest.importorskip("matplotlib")
    recs = _result(True)["records"]
    assert plots._ratio_heatmaps(recs, "eager", tmp_path / "bench_vs_gvr2.png", "GVR / gvr_2")
    assert (tmp_path / "bench_vs_gvr2.png").stat().st_size > 0
    # older results (no gvr_2 records) get no GVR-vs-gvr_2 panel
    old = _result(False)["records"]
    assert not plots._ratio_heatmaps(old, "eager", tmp_path / "old_vs_gvr2.png", "")
    assert not (tmp_path / "old_vs_gvr2.png").exists()


@pytest.mark.slow
def test_make_plots_from_synthetic_records(tmp_path):
    pytest.importorskip("matplotlib")
    made = plots.make_plots(_result(True), tmp_path, "bench")
    assert made == [
        "bench_speedup.png",
        "bench_graph_speedup.png",
        "bench_vs_gvr2.png",
        "bench_graph_vs_gvr2.png",
        "bench_time.png",
    ]
    assert all((tmp_path / m).stat().st_size > 0 for m in made)
