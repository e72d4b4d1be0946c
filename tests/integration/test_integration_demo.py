"""``python -m gvr_integration.demo``: the report, ``--json``, and the exit status."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import gvr_integration
import pytest
import torch
from gvr_integration import demo
from gvr_integration.pipeline import DecodeConfig

SMALL = ["--device", "cpu", "--k", "512", "2048", "--next-n", "2", "--batch", "2", "--steps", "2"]


def test_default_configs_respect_the_cache_width():
    cfgs = demo.default_configs([512, 1024, 2048], [1, 2], [1, 4], ["positive"], 4, 4096, 4)
    assert DecodeConfig(2048, 1, 1, "positive", 4) in cfgs
    assert all(c.k <= 4096 // c.compress_ratio for c in cfgs)
    assert len(cfgs) == 2 * (3 + 2)  # K=2048 does not fit the 1024 pooled keys
    assert demo.default_configs([512], [1], [2], ["positive"], 1, 4096, 4) == []


def test_demo_report_and_json(tmp_path, capsys):
    path = tmp_path / "report.json"
    rc = demo.main(
        [*SMALL, "--compress-ratio", "1", "4", "--weights", "signed", "--json", str(path)]
    )
    assert rc == 0
    text = capsys.readouterr().out
    assert "verdict: OK" in text and "torch.topk" in text
    rep = json.loads(path.read_text())
    assert rep["ok"] and rep["all_exact"] and rep["device"] == "cpu"
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
        "--json",
        str(path),
    ]
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(path.read_text())["engine"] == "numba CPU engine"
