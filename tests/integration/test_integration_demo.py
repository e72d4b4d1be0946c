"""``python -m gvr_integration.demo``: the report, ``--json``, and the exit status."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import gvr_integration
import numpy as np
import pytest
import torch
from gvr_integration import demo
from gvr_integration.pipeline import DecodeConfig
from gvr_integration.report import DemoReport, LongRowResult

SMALL = ["--device", "cpu", "--k", "512", "2048", "--next-n", "2", "--batch", "2", "--steps", "2"]
SMALL += ["--long-rows", "8192", "--long-batch", "2"]


def test_default_configs_respect_the_cache_width():
    cfgs = demo.default_configs([512, 1024, 2048], [1, 2], [1, 4], ["positive"], 4, 4096, 4)
    assert DecodeConfig(2048, 1, 1, "positive", 4) in cfgs
    assert all(c.k <= 4096 // c.compress_ratio for c in cfgs)
    assert len(cfgs) == 2 * (3 + 2)  # K=2048 does not fit the 1024 pooled keys
    assert demo.default_configs([512], [1], [2], ["positive"], 1, 4096, 4) == []


def test_default_configs_name_a_skipped_ratio_once(caplog):
    demo.default_configs([512], [1], [1, 2], ["positive", "signed"], 1, 4096, 4)
    assert caplog.text.count("skipping compress_ratio 2") == 1


def test_report_header_names_the_long_rows_it_shows():
    rep = DemoReport(device="cpu", engine="e", sample="s", torch_version="t")
    assert "no long-row call ran" in rep.header_lines()[-1]
    rep.long_rows = [LongRowResult("x", 4, w, 512) for w in (65536, 1000)]
    assert "rows of 1,000-65,536 scores" in rep.header_lines()[-1]
    rep.long_rows = rep.long_rows[1:]
    assert "rows of 1,000 scores" in rep.header_lines()[-1]


def test_demo_report_and_json(tmp_path, capsys, caplog):
    path = tmp_path / "report.json"
    rc = demo.main(
        [*SMALL, "--compress-ratio", "1", "4", "--weights", "signed", "--json", str(path)]
    )
    assert rc == 0
    text = capsys.readouterr().out
    assert "verdict: OK" in text and "torch.topk" in text
    assert (
        "x torch = torch.topk time / GVR time per call" in text and "above 1 GVR is faster" in text
    )
    # progress was logged while it ran: the engine, every run, the long rows
    progress = caplog.text
    assert "preparing the numba CPU engine" in progress and "CPU engine ready in" in progress
    assert "[3/3]" in progress and "long rows (sample, concatenated): 2 x 8192" in progress
    rep = json.loads(path.read_text())
    assert rep["ok"] and rep["all_exact"] and rep["long_rows_exact"] and rep["device"] == "cpu"
    assert [
        (r["width"], r["k"], r["rows"]) for r in rep["long_rows"] if "sample" in r["source"]
    ] == [
        (8192, 512, 2),
        (8192, 2048, 2),
    ]
    for r in rep["long_rows"]:
        assert r["exact"] and r["gvr_us"] > 0 and r["torch_topk_us"] > 0
    assert {(r["k"], r["compress_ratio"]) for r in rep["results"]} == {
        (512, 1),
        (2048, 1),
        (512, 4),
    }
    for r in rep["results"]:
        assert r["steps"] == 2 and r["exact_steps"] == 2 and r["rows_per_step"] == 4
        assert r["gvr_us"] > 0 and r["torch_topk_us"] > 0
        assert r["attn_max_abs_diff"] <= r["attn_tolerance"]
        assert r["mode"] == "eager"


def test_demo_exits_1_on_an_inexact_step(monkeypatch, capsys):
    real = gvr_integration.ops.topk_decode

    def corrupt(*args, **kwargs):
        out = real(*args, **kwargs)
        out[0, 0] = out[0, 1]
        return out

    monkeypatch.setattr(gvr_integration.ops, "topk_decode", corrupt)
    rc = demo.main([*SMALL, "--k", "512", "--compress-ratio", "4", "--weights", "positive"])
    assert rc == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "verdict: FAILED" in out and "duplicate" in out


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU default")
def test_demo_as_a_module(tmp_path):
    path = tmp_path / "r.json"
    cmd = [
        sys.executable,
        "-m",
        "gvr_integration.demo",
        "--k",
        "512",
        "--next-n",
        "1",
        "--compress-ratio",
        "4",
        "--weights",
        "positive",
        "--steps",
        "1",
        "--long-rows",
        "65536",
        "--json",
        str(path),
    ]
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(path.read_text())["engine"] == "numba CPU engine"
    # a real process: progress on stderr, the report on stdout
    assert "preparing the numba CPU engine" in proc.stderr and "done" in proc.stderr
    assert "verdict: OK" in proc.stdout and "verdict" not in proc.stderr


def test_report_fits_100_columns():
    from gvr_integration.report import ConfigResult, DemoReport, LongRowResult
    from rich.console import Console

    rep = DemoReport(device="cpu", engine="numba CPU engine", sample="s", torch_version="2")
    for k in (512, 1024, 2048):
        r = ConfigResult(k, 2, 4, "positive", 8, "graph", steps=123, rows_per_step=16)
        r.min_len, r.max_len, r.exact_steps = 100_000, 262_144, 123
        r.gvr_us, r.torch_topk_us, r.attn_max_abs_diff, r.attn_tolerance = 12345.6, 98765.4, 1, 2
        rep.results.append(r)
    rep.long_rows.append(LongRowResult("shared 131K rows", 12, 262_144, 2048, True, 1e4, 9e4))
    text = rep.render(Console(width=100, record=False))
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 100
    # every result is one table line (nothing wrapped), with its ratio
    assert sum("K=" in line and "8.00x" in line for line in lines) == 3
    assert sum("shared 131K rows" in line and "9.00x" in line for line in lines) == 1


def test_long_rows_are_real_scores(monkeypatch):
    from gvr_reference.realdata import indexer_scores, load_sample

    sample = load_sample()
    x = demo.long_rows_from_sample(sample, 300_000, 3)
    assert x.shape == (3, 300_000) and x.dtype == np.float32 and np.isfinite(x).all()
    logits, lens = indexer_scores(sample, next_n=1, compress_ratio=1, weights="signed")
    flat = np.concatenate([logits[i, : int(n)] for i, n in enumerate(lens)])
    assert np.array_equal(x[0, : flat.shape[0]], flat)  # row 0 is the sequence itself ...
    assert np.array_equal(x[0, flat.shape[0] :], flat[: 300_000 - flat.shape[0]])  # ... wrapped
    start = flat.shape[0] // 3
    assert np.array_equal(x[1, :10], flat[start : start + 10])  # row 1 starts a third in


def test_an_inexact_long_row_fails_the_demo(monkeypatch):
    real = gvr_dispatch_topk = demo.gvr_dispatch.topk

    def corrupt(x, k, lengths=None, *, out):
        real(x, k, lengths, out=out)
        out[0, 0] = out[0, 1]
        return out

    monkeypatch.setattr(demo.gvr_dispatch, "topk", corrupt)
    rc = demo.main([*SMALL, "-q", "--k", "512", "--compress-ratio", "4", "--weights", "positive"])
    assert rc == 1
    assert gvr_dispatch_topk is real


def test_bad_options_are_usage_errors(capsys):
    """Options no run can use exit with a usage error naming the option, before any work."""
    for argv, text in (
        (["--next-n", "0"], "--next-n must be >= 1"),
        (["--k", "8192"], "--k must be in [1, 2048]"),
        (["--compress-ratio", "3"], "--compress-ratio must be a power of two"),
        (["--reps", "0"], "--reps must be >= 1"),
        (["--batch", "0"], "--batch must be >= 1"),
        (["--long-rows", "0"], "--long-rows must be >= 1"),
        (["--device", "bogus"], "--device must be auto, cpu or cuda[:i]"),
        (["--device", "meta"], "--device must be auto, cpu or cuda[:i]"),
        (["--compress-ratio", "1", "2"], "--compress-ratio must be 1 or the sample's 4"),
        (["--sample", "no-such-sample"], "--sample 'no-such-sample': no sample"),
        (["--sample", __file__], f"--sample {__file__!r}: "),  # not a safetensors file
    ):
        with pytest.raises(SystemExit) as exc:
            demo.parse_args(argv)
        assert exc.value.code == 2
        assert text in capsys.readouterr().err, argv
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit):
            demo.parse_args(["--device", "cuda"])
        assert "no CUDA device is available" in capsys.readouterr().err
    args = demo.parse_args(["--device", "cpu", "--k", "512", "--compress-ratio", "1", "4"])
    assert (args.k, args.compress_ratio) == ([512], [1, 4])
