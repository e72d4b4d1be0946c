"""CPU tests of ``benchmarks/bench_topk.py``: argument parsing, the gvr_2 provider's contract
checks and call, ratios and the summary, the per-family inexact report and the exit status,
the comparison table and the clock readout. Nothing here needs a GPU."""

from __future__ import annotations

import importlib.util
import math
import sys
import types
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

BENCH_DIR = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", BENCH_DIR / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up while building classes
    spec.loader.exec_module(mod)
    return mod


bt = _load("bench_topk")


def rec(provider, us, *, set="decode-grid", timing="eager", k=512, rows=1, n=4096, **kw):
    base = dict(
        set=set,
        provider=provider,
        timing=timing,
        k=k,
        rows=rows,
        n=n,
        next_n=kw.pop("next_n", 1),
        compress_ratio=kw.pop("compress_ratio", 1),
        family=kw.pop("family", "gaussian"),
        exact=kw.pop("exact", True if us is not None else None),
    )
    return bt.Record(median_us=us, **base, **kw)


def cell(gvr, gvr2, torch_us, **key):
    """The records of one cell, with the ratios the benchmark attaches."""
    recs = [rec("gvr", gvr, **key), rec("gvr2", gvr2, **key), rec("torch", torch_us, **key)]
    bt.attach_ratios(recs)
    return recs


def grid(ratio_of):
    """A small decode grid: K 512 and 2048, n 4096 and 65536, b 1 and 8, GVR at 10 us,
    gvr_2 at 10 us / ratio_of(k, b, n), torch at 40 us."""
    out = []
    for k in (512, 2048):
        for n in (4096, 65536):
            for b in (1, 8):
                out += cell(10.0, 10.0 / ratio_of(k, b, n), 40.0, k=k, rows=b, n=n)
    return out


# ----------------------------------------------------------------------------- arguments
def test_default_providers_and_validation(capsys):
    args = bt.parse_args([])
    assert args.providers == ["gvr", "gvr2", "torch"]
    assert args.sets == ["decode-grid", "graph", "host"]
    assert not args.full_table
    args = bt.parse_args(["--providers", "gvr,gvr-raw,gvr2,torch,flashinfer", "--full-table"])
    assert args.providers == ["gvr", "gvr-raw", "gvr2", "torch", "flashinfer"] and args.full_table
    assert set(args.providers) <= set(bt.PROVIDERS)
    with pytest.raises(SystemExit):
        bt.parse_args(["--providers", "gvr,nope"])
    with pytest.raises(SystemExit):
        bt.parse_args(["--sets", "decode-grid,nope"])


def test_grid_options():
    full = bt.parse_args([])
    assert bt.grid_shape("decode-grid", full) == (bt.GRID_K, bt.GRID_N, bt.GRID_B)
    assert bt.grid_shape("host", full) == ((512, 2048), (4096,), (1,))
    args = bt.parse_args(["--grid-n", "6144,8192", "--grid-b", "1,16"])
    assert bt.grid_shape("graph", args) == (bt.GRID_K, (6144, 8192), (1, 16))
    assert bt.grid_shape("half", args)[1:] == ((6144, 8192), (1, 16))
    quick = bt.parse_args(["--quick"])
    assert bt.grid_shape("decode-grid", quick)[1:] == ((16384, 262144), (1, 128))
    assert bt.grid_shape("half-graph", quick)[1:] == ((16384, 262144), (1, 512))
    assert bt.grid_shape("graph", bt.parse_args(["--quick", "--grid-b", "8"]))[2] == (8,)
    # the ragged sets' arenas and batches (None: RAGGED_WIDTHS, RAGGED_B)
    assert (full.ragged_widths, full.ragged_b) == (None, None)
    args = bt.parse_args(["--ragged-widths", "131072", "--ragged-b", "160,256"])
    assert (args.ragged_widths, args.ragged_b) == ((131072,), (160, 256))
    for bad in (
        ["--grid-n", "0,4096"], ["--grid-b", "x"], ["--grid-n", ","], ["--ragged-b", "0"],
    ):  # fmt: skip
        with pytest.raises(SystemExit):
            bt.parse_args(bad)


def test_help_works_without_a_gpu(capsys):
    with pytest.raises(SystemExit) as exc:
        bt.parse_args(["--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert "gvr2" in text and "skip_check=True" in text and "stage.sh jit --gvr2" in text


# ----------------------------------------------------------------------------- gvr_2 contract
def decode_case(rows=4, width=4096, alloc=None, k=512, **kw):
    alloc = alloc or width
    logits = torch.randn(rows, alloc)[:, :width]
    lengths = torch.full((rows,), width, dtype=torch.int64)
    return bt.Case(
        "decode-grid",
        "decode",
        k,
        logits,
        torch.zeros_like(lengths),
        lengths,
        kv_lens=lengths.to(torch.int32),
        **kw,
    )


def test_gvr2_applies_to_decode_rows_and_padded_views():
    assert bt.gvr2_not_applicable(decode_case()) is None
    # a [:, :width] view of an allocation padded to a multiple of 4 is addressable in place
    padded = decode_case(width=4097, alloc=4100)
    assert not padded.logits.is_contiguous()
    assert bt.gvr2_not_applicable(padded) is None
    for k in bt.GVR2_K:
        assert bt.gvr2_not_applicable(decode_case(k=k)) is None


@pytest.mark.parametrize(
    "case, words",
    [
        (lambda: decode_case(k=256), "K = 256"),
        (lambda: decode_case(next_n=2), "next_n = 2"),
        (lambda: decode_case(cr=4), "compress_ratio = 4"),
        (lambda: decode_case(width=4097, alloc=4097), "multiple of 4"),
        (lambda: decode_case(rows=1, width=4098), "multiple of 4"),
    ],
)
def test_gvr2_not_applicable_reasons(case, words):
    why = bt.gvr2_not_applicable(case())
    assert why is not None and words in why


def test_gvr2_layout_checks():
    x = torch.randn(64, 4096)
    assert bt.gvr2_layout_problem(x) is None
    assert "inner stride" in bt.gvr2_layout_problem(x.t())
    assert "fp32" in bt.gvr2_layout_problem(x.to(torch.bfloat16))
    assert "overlapping" in bt.gvr2_layout_problem(torch.randn(1, 4096).expand(8, 4096))
    assert "aligned" in bt.gvr2_layout_problem(torch.randn(2, 4100)[:, 1:4097])


def test_gvr2_prefill_and_offset_windows_are_not_applicable():
    c = decode_case()
    c.mode = "prefill"
    assert "prefill" in bt.gvr2_not_applicable(c)
    c = decode_case()
    c.starts = torch.ones_like(c.starts)
    assert "column 0" in bt.gvr2_not_applicable(c)


def test_gvr2_seq_lens_are_the_row_lengths():
    c = decode_case(rows=3)
    c.lengths = torch.tensor([4096, 17, 0])
    s = bt.gvr2_seq_lens(c)
    assert s.dtype == torch.int32 and s.tolist() == [4096, 17, 0] and s.is_contiguous()
    c.mode = "dense"
    assert bt.gvr2_seq_lens(c).tolist() == [4096] * 3


@pytest.fixture
def fake_flashinfer(monkeypatch):
    """A stand-in ``flashinfer.topk_varlen.topk_varlen`` that records its calls and writes
    a top-K into ``out_indices``."""
    calls = []

    def top_k_varlen(logits, seq_lens, top_k, **kw):
        calls.append((logits, seq_lens, top_k, kw))
        out = kw["out_indices"]
        out.copy_(torch.topk(logits, top_k, dim=1).indices.to(torch.int32))
        return out, None

    pkg = types.ModuleType("flashinfer")
    sub = types.ModuleType("flashinfer.topk_varlen")
    leaf = types.ModuleType("flashinfer.topk_varlen.topk_varlen")
    leaf.top_k_varlen = top_k_varlen
    pkg.topk_varlen, sub.topk_varlen = sub, leaf
    monkeypatch.setitem(sys.modules, "flashinfer", pkg)
    monkeypatch.setitem(sys.modules, "flashinfer.topk_varlen", sub)
    monkeypatch.setitem(sys.modules, "flashinfer.topk_varlen.topk_varlen", leaf)
    return calls


def test_gvr2_call_contract(fake_flashinfer):
    c = decode_case(width=4097, alloc=4100)
    out = torch.full((c.rows, c.k), 0x7FFFFFFF, dtype=torch.int32)
    fn, finish = bt.make_call("gvr2", c, out)
    assert finish is None
    fn()
    (logits, seq_lens, k, kw) = fake_flashinfer[0]
    assert logits is c.logits  # the very tensor (and row stride) the other providers get
    assert seq_lens.dtype == torch.int32 and seq_lens.tolist() == c.lengths.tolist()
    assert k == c.k
    assert kw == {"backend": "gvr_2", "skip_check": True, "out_indices": out}
    assert "K = 300" in bt.make_call("gvr2", decode_case(k=300), out)


def test_gvr2_not_importable(monkeypatch):
    monkeypatch.setitem(sys.modules, "flashinfer", None)
    with pytest.raises(ImportError):
        bt.make_call("gvr2", decode_case(), torch.empty(4, 512, dtype=torch.int32))
    assert bt.flashinfer_version() is None


# ----------------------------------------------------------------------------- run_case
class FakeTimer:
    def cold(self, fn):
        fn()
        return 10.0, 9.0, 11.0

    def graph(self, fn):
        raise RuntimeError("capture refused\nsecond line")


def test_run_case_records_per_provider(fake_flashinfer, monkeypatch):
    real_make_call = bt.make_call

    def make_call(name, case, out):
        if name == "gvr":  # exact, from torch.topk
            return (
                lambda: out.copy_(torch.topk(case.logits, case.k).indices.to(torch.int32))
            ), None
        return real_make_call(name, case, out)

    monkeypatch.setattr(bt, "make_call", make_call)
    records = []
    c = decode_case(rows=2, width=1024)
    bt.run_case(c, FakeTimer(), ["gvr", "gvr2", "torch"], records)
    assert [(r.provider, r.exact, r.median_us) for r in records] == [
        ("gvr", True, 10.0),
        ("gvr2", True, 10.0),
        ("torch", True, 10.0),
    ]
    assert records[0].ratio_vs_gvr2 == 1.0 and records[0].speedup_vs_torch == 1.0
    # outside gvr_2's contract: a record saying so, not a silent skip
    records = []
    bt.run_case(decode_case(width=1024, next_n=2), FakeTimer(), ["gvr2"], records)
    assert records[0].exact is None and records[0].note.startswith("not applicable: next_n")
    # graph timing that cannot capture: exact, not timed, the reason on one line
    records = []
    g = decode_case(width=1024)
    g.set = "graph"
    bt.run_case(g, FakeTimer(), ["gvr2"], records)
    assert records[0].timing == "graph" and records[0].exact is True
    assert records[0].note == "not timed: RuntimeError: capture refused"


def test_run_case_inexact_provider_is_not_timed(monkeypatch):
    def make_call(name, case, out):
        return (lambda: out.copy_(torch.arange(case.k, dtype=torch.int32).expand_as(out))), None

    monkeypatch.setattr(bt, "make_call", make_call)
    c = decode_case(rows=3, width=1024, family="nan")
    c.logits[:, 700] = float("nan")  # the top element sits outside 0..511
    records = []
    bt.run_case(c, FakeTimer(), ["gvr2"], records)
    r = records[0]
    assert r.exact is False and r.median_us is None and r.note == "inexact: 3 of 3 rows; not timed"
    assert bt.exit_status(records) == 0
    assert bt.inexact_by_family(records) == {"gvr2": {"nan": 1}}


# ----------------------------------------------------------------------------- ratios, summary
def test_attach_ratios():
    g, g2, t = cell(10.0, 8.0, 40.0)
    assert g.speedup_vs_torch == 4.0 and g.ratio_vs_gvr2 == 1.25
    assert g2.speedup_vs_torch == 5.0 and g2.ratio_vs_gvr2 is None
    assert t.speedup_vs_torch == 1.0 and t.ratio_vs_gvr2 is None
    # gvr_2 not timed (not applicable): no ratio, torch speedup still there
    g, g2, t = cell(10.0, None, 40.0)
    assert g.ratio_vs_gvr2 is None and g.speedup_vs_torch == 4.0


def test_summary_ratios_geomean_and_faster_counts():
    # GVR faster than gvr_2 (ratio 0.5) at b = 8, n = 65536; slower (ratio 2) elsewhere at b = 1
    def ratio_of(k, b, n):
        if b == 8:
            return 0.5 if n == 65536 else 1.0
        return 2.0

    recs = grid(ratio_of)
    s = bt.summary(recs)
    block = s["by_set"]["decode-grid"]["eager"]
    rb = block["gvr_vs_gvr2"]
    assert rb["cells"] == 8
    ratios = [2.0] * 4 + [1.0, 0.5] * 2
    assert math.isclose(rb["geomean_ratio"], math.exp(sum(map(math.log, ratios)) / 8))
    assert rb["gvr_faster_cells"] == 2
    assert rb["best_ratio"] == 0.5 and rb["worst_ratio"] == 2.0
    assert rb["best_cell"] == {"k": 512, "rows": 8, "n": 65536, "family": "gaussian"}
    assert rb["worst_cell"]["rows"] == 1
    assert list(rb["by_batch"]) == ["1", "8"]
    assert math.isclose(rb["by_batch"]["1"]["geomean_ratio"], 2.0)
    assert math.isclose(rb["by_batch"]["8"]["geomean_ratio"], math.sqrt(0.5))
    assert rb["by_batch"]["8"]["gvr_faster_cells"] == 2
    assert math.isclose(block["gvr_vs_torch"]["geomean_speedup"], 4.0)
    assert "gvr2_vs_torch" in block
    # the legacy keys stay as they were
    assert s["decode_grid_eager"]["cells"] == 8
    assert math.isclose(s["decode_grid_eager"]["geomean_speedup"], 4.0)
    line = next(h for h in s["headlines"] if "gvr_2's time" in h)
    assert line.startswith("decode grid, eager: GVR takes ")
    assert (
        "faster in 2 of 8 cells" in line and "2.00x at b = 1" in line and "0.71x at b = 8" in line
    )


def test_summary_real_and_adversarial_sets():
    recs = []
    recs += cell(10.0, 20.0, 30.0, set="real", k=1024, rows=12, n=131072, family="kjv")
    recs += cell(10.0, 5.0, 30.0, set="real", k=1024, rows=8, n=32768, family="stdlib")
    recs += cell(10.0, 12.5, 30.0, set="adversarial", family="quantized")
    recs += [rec("gvr", 10.0, set="adversarial", family="nan")]
    recs += [rec("gvr2", None, set="adversarial", family="nan", exact=False, note="inexact")]
    recs += [rec("torch", 20.0, set="adversarial", family="nan")]
    bt.attach_ratios(recs[-3:])
    s = bt.summary(recs)
    real = s["by_set"]["real"]["eager"]["gvr_vs_gvr2"]
    assert real["cells"] == 2 and real["gvr_faster_cells"] == 1
    assert math.isclose(real["geomean_ratio"], 1.0) and "by_batch" not in real
    adv = s["by_set"]["adversarial"]["eager"]
    assert adv["gvr_vs_gvr2"]["cells"] == 1 and adv["gvr_vs_gvr2"]["best_ratio"] == 0.8
    assert adv["gvr_vs_torch"]["cells"] == 2
    assert "decode_grid_eager" not in s


def test_summary_without_gvr2_is_as_before():
    recs = []
    for b in (1, 8):
        g, t = rec("gvr", 10.0, rows=b, n=262144), rec("torch", 20.0 * b, rows=b, n=262144)
        bt.attach_ratios([g, t])
        recs += [g, t]
    s = bt.summary(recs)
    assert s["decode_grid_eager"] == {
        "cells": 2,
        "geomean_speedup": math.sqrt(2.0 * 16.0),
        "min_speedup": 2.0,
        "max_speedup": 16.0,
    }
    assert s["b1_n262144_max_us"] == 10.0
    assert "gvr_vs_gvr2" not in s["by_set"]["decode-grid"]["eager"]
    assert all("gvr_2's time" not in h for h in s["headlines"])


# ----------------------------------------------------------------------------- exactness report
def test_exit_status_rule():
    recs = grid(lambda k, b, n: 1.0)
    assert bt.exit_status(recs) == 0
    bad2 = [
        rec("gvr2", None, set="adversarial", family="nan", exact=False, note="inexact"),
        rec("gvr2", None, set="adversarial", family="nan", k=2048, exact=False, note="inexact"),
        rec("gvr2", None, set="adversarial", family="two_valued", exact=False, note="inexact"),
        rec("flashinfer", None, set="adversarial", family="nan", exact=False, note="inexact"),
    ]
    assert bt.exit_status(recs + bad2) == 0
    assert bt.claimed_failures(recs + bad2) == []
    assert bt.inexact_by_family(recs + bad2) == {
        "gvr2": {"nan": 2, "two_valued": 1},
        "flashinfer": {"nan": 1},
    }
    for prov in bt.CLAIMS_EXACT:
        bad = rec(prov, None, set="adversarial", family="nan", exact=False, note="inexact")
        assert bt.exit_status(recs + bad2 + [bad]) == 1
        (msg,) = bt.claimed_failures(recs + bad2 + [bad])
        assert msg.startswith(f"{prov} adversarial eager k=512") and "family=nan" in msg
        assert prov not in bt.inexact_by_family([bad])
    # not applicable / not importable records are neither failures nor inexact cells
    na = rec("gvr2", None, exact=None, note="not applicable: prefill windows")
    assert bt.exit_status([na]) == 0 and bt.inexact_by_family([na]) == {}


# ----------------------------------------------------------------------------- tables
def test_comparison_rows_and_width(capsys):
    recs = grid(lambda k, b, n: 0.8)
    recs += [
        rec("gvr", 30.0, set="mtp", next_n=2, compress_ratio=4, rows=2, n=65536),
        rec(
            "gvr2",
            None,
            set="mtp",
            next_n=2,
            compress_ratio=4,
            rows=2,
            n=65536,
            note="not applicable: next_n = 2",
        ),
        rec("torch", 60.0, set="mtp", next_n=2, compress_ratio=4, rows=2, n=65536),
    ]
    bt.attach_ratios(recs[-3:])
    recs += cell(10.0, 9.0, 30.0, set="real", family="gemma3-270m-l5-kjv-131k-cr4")
    recs += [rec("gvr", 9.0, set="host", timing="host")]
    rows = bt.comparison_rows(recs)
    assert len(rows) == 8 + 1 + 1  # the host cell is left out
    assert rows[0] == (
        "decode-grid",
        "512",
        "1",
        "4096",
        "gaussian",
        "eager",
        "10.0",
        "12.5",
        "40.0",
        "0.80",
        "4.00",
    )
    mtp = rows[8]
    assert mtp[4] == "gaussian nn2 cr4" and mtp[7] == "n/a" and mtp[9] == "-"
    bt.print_comparison(recs)
    text = capsys.readouterr().out
    assert "gvr/gvr2" in text and "gemma3" in text
    assert max(len(line) for line in text.splitlines()) <= 100


def test_full_table_prints(capsys):
    bt.print_table(cell(10.0, 8.0, 40.0))
    assert "/ gvr2" in capsys.readouterr().out


def test_records_serialise_with_the_new_field():
    d = asdict(cell(10.0, 8.0, 40.0)[0])
    assert d["ratio_vs_gvr2"] == 1.25 and d["speedup_vs_torch"] == 4.0


# ----------------------------------------------------------------------------- clocks
def test_parse_clocks():
    c = bt.parse_clocks("1980 MHz, 3201 MHz, 1980 MHz, 121.37 W, 34")
    assert c["sm_mhz"] == 1980 and c["mem_mhz"] == 3201 and c["max_sm_mhz"] == 1980
    assert c["power_w"] == 121.37 and c["temp_c"] == 34
    c = bt.parse_clocks("1980 MHz, 3201 MHz, 1980 MHz, [N/A], 34")
    assert c["power_w"] is None and c["temp_c"] == 34
    assert bt.parse_clocks("")["sm_mhz"] is None


def test_read_clocks_without_nvidia_smi(monkeypatch):
    def missing(*a, **kw):
        raise FileNotFoundError("nvidia-smi")

    monkeypatch.setattr(bt.subprocess, "run", missing)
    monkeypatch.setattr(bt, "_gpu_uuid", lambda: None)
    c = bt.read_clocks("start")
    assert c["stage"] == "start" and c["error"] == "nvidia-smi not available"


def test_read_clocks_parses_the_query(monkeypatch):
    seen = []

    def smi(cmd, **kw):
        seen.append(cmd)
        return types.SimpleNamespace(
            returncode=0, stdout="1755 MHz, 3201 MHz, 1980 MHz, 98 W, 40\n"
        )

    monkeypatch.setattr(bt.subprocess, "run", smi)
    monkeypatch.setattr(bt, "_gpu_uuid", lambda: "GPU-1234")
    c = bt.read_clocks("end")
    assert c["sm_mhz"] == 1755 and c["max_sm_mhz"] == 1980
    assert seen[0][:2] == [
        "nvidia-smi",
        "--query-gpu=clocks.sm,clocks.mem,clocks.max.sm,power.draw,temperature.gpu",
    ]
    assert seen[0][-2:] == ["-i", "GPU-1234"]


def test_gvr2_note_names_skip_check():
    note = bt.gvr2_note("0.7.2.post1", "NVIDIA H200", 9, 0)
    assert "skip_check=True" in note and "sm_90a" in note and "0.7.2.post1" in note


def test_ragged_lengths_follow_the_documented_distribution():
    import numpy as np

    for b, width in ((8, 65536), (64, 262144), (256, 65536)):
        lengths = bt.ragged_lengths(b, width, seed=3)
        assert lengths.shape == (b,) and lengths.dtype == np.int64
        assert lengths.min() >= 256 and lengths.max() == width and lengths[-1] == width
        short = int((lengths <= 4096).sum())
        long = int((lengths >= width // 2).sum())
        assert long >= 1
        assert abs(short - 0.8 * b) <= max(2, 0.05 * b)
        assert np.array_equal(lengths, bt.ragged_lengths(b, width, seed=3))
        groups = bt.ragged_groups(lengths, width)
        covered = np.sort(np.concatenate(groups))
        assert np.array_equal(covered, np.arange(b))
        bounds = [4096, width // 4, width]
        assert all(lengths[g].max() <= bounds[i] for i, g in enumerate(groups))


def test_ragged_lengths_in_narrow_arenas():
    """Arenas narrower than 16,384 scores (the mid class's bounds cross): every length within
    the width, the last row the full width, and each row in exactly one length group."""
    import numpy as np

    for b, width in ((8, 4096), (64, 4096), (64, 6144), (16, 1024), (8, 200)):
        lengths = bt.ragged_lengths(b, width, seed=1)
        assert lengths.shape == (b,) and lengths[-1] == width, (b, width)
        assert lengths.min() >= min(256, width // 2) and lengths.max() == width
        covered = np.sort(np.concatenate(bt.ragged_groups(lengths, width)))
        assert np.array_equal(covered, np.arange(b)), (b, width)


def test_ragged_vs_grouped_summary():
    recs = []
    for prov, us in (("gvr", 30.0), ("gvr-grouped", 25.0), ("gvr2", 40.0), ("torch", 90.0)):
        recs.append(
            dict(
                set="ragged", provider=prov, timing="eager", k=512, rows=64, n=65536,
                next_n=1, compress_ratio=1, family="ragged", exact=True, median_us=us,
                speedup_vs_torch=90.0 / us, ratio_vs_gvr2=us / 40.0 if prov == "gvr" else None,
            )
        )  # fmt: skip
    out = bt.summary(recs)
    block = out["ragged_vs_grouped"]["eager"]
    assert block["cells"] == 1 and abs(block["geomean_ratio"] - 1.2) < 1e-9
    assert any(h.startswith("ragged, eager: GVR takes 1.20x") for h in out["headlines"])


def test_bandwidth_summary_and_the_read_floor_record(monkeypatch):
    recs = []
    for b in (32, 128, 512):
        for prov, us in (("gvr", 150.0), ("gvr2", 200.0 if b == 512 else 100.0), ("amax", 140.0)):
            recs.append(
                dict(
                    set="decode-grid", provider=prov, timing="eager", k=512, rows=b, n=262144,
                    next_n=1, compress_ratio=1, family="gaussian", exact=prov != "amax" or None,
                    median_us=us, gbps=b * 262144 * 4 / (us * 1e3), speedup_vs_torch=2.0,
                )
            )  # fmt: skip
    out = bt.summary(recs)
    block = out["bandwidth"]["eager"]
    # b = 32 is not a bandwidth cell; b = 128: 150 / 100, b = 512: 150 / 200
    assert block["cells_b128"] == 2 and block["worst_vs_gvr2_b128"] == 1.5
    assert block["worst_cell_b128"] == "k=512 b=128 n=262144"
    (big,) = block["b512_n262144"]
    assert big["gvr_us"] == 150.0 and big["amax_us"] == 140.0 and big["gvr2_us"] == 200.0
    assert any(h.startswith("bandwidth, eager: at b=512") for h in out["headlines"])
    assert "amax_vs" not in repr(out)  # the read floor gets no speedup or ratio block
    # the read floor is timed without a top-K check and says what it is
    records = []
    bt.run_case(decode_case(rows=2, width=1024), FakeTimer(), ["amax"], records)
    (r,) = records
    assert r.exact is None and r.median_us == 10.0 and r.note.startswith("read floor")
