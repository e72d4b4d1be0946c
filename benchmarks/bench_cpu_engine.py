"""Time the gvr-reference numba CPU engine against ``torch.topk`` on the CPU.

Every cell uses the same gaussian rows (a fresh seeded draw per cell) for both providers. Both
answers are checked exact by the validator before anything is timed. Timings are taken after
a warm-up, alternating the providers repetition by repetition (so that load from other
processes falls on both alike), and the median is reported.

Providers:
- ``gvr``: ``cpu_engine.dense(x, k, out=..., values=...)``: indices and values, unsorted,
  into preallocated buffers (the same outputs ``torch.topk`` produces);
- ``torch``: ``torch.topk(x, k, sorted=False, out=...)``, the baseline of the speedup;
- ``torch_sorted``: ``torch.topk(x, k, sorted=True, out=...)`` (torch's default), for reference.

Usage::

    python benchmarks/bench_cpu_engine.py                     # the full grid, 15 repetitions
    python benchmarks/bench_cpu_engine.py --batch 1 32 --reps 5
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path

import numba
import numpy as np
import torch
from gvr_reference import cpu_engine, validate

logger = logging.getLogger("bench_cpu_engine")
ROOT = Path(__file__).resolve().parents[1]
OUT_DIR = ROOT / "benchmarks" / "results" / "cpu"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _metadata(args: argparse.Namespace) -> dict:
    return {
        "commit": _commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu_model": _cpu_model(),
        "cpu_cores": os.cpu_count(),
        "numba_threads": numba.get_num_threads(),
        "numba_threading_layer": _threading_layer(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba.__version__,
        "torch": torch.__version__,
        "repetitions": args.reps,
        "warmup": args.warmup,
        "statistic": "median of repetitions, providers alternated",
        "input": "standard normal fp32 rows, contiguous, seeded per cell",
        "load_average_1_5_15min_at_end": list(os.getloadavg()),
    }


def _threading_layer() -> str:
    try:
        return numba.threading_layer()
    except ValueError:
        return "not initialised"


def _time_once(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _check_exact(x: np.ndarray, k: int, indices: np.ndarray, values: np.ndarray, who: str):
    report = validate.check_dense(x, k, indices, values=values)
    if not report.ok:
        logger.error("%s is not exact:\n%s", who, report.summary())
    return report.ok


def run_cell(b: int, n: int, k: int, args: argparse.Namespace) -> dict:
    """Check and time one (batch, width, K) cell."""
    rng = np.random.default_rng([b, n, k, args.seed])
    x = rng.standard_normal((b, n), dtype=np.float32)
    xt = torch.from_numpy(x)
    out = np.empty((b, k), np.int32)
    vals = np.empty((b, k), np.float32)
    t_vals = torch.empty((b, k), dtype=torch.float32)
    t_idx = torch.empty((b, k), dtype=torch.int64)

    def gvr():
        cpu_engine.dense(x, k, out=out, values=vals)

    def torch_unsorted():
        torch.topk(xt, k, dim=-1, sorted=False, out=(t_vals, t_idx))

    def torch_sorted():
        torch.topk(xt, k, dim=-1, sorted=True, out=(t_vals, t_idx))

    gvr()
    t0 = time.perf_counter()
    exact = _check_exact(x, k, out, vals, "gvr")
    check_s = time.perf_counter() - t0
    torch_unsorted()
    exact_torch = _check_exact(x, k, t_idx.numpy().astype(np.int32), t_vals.numpy(), "torch.topk")

    providers = {"gvr": gvr, "torch": torch_unsorted, "torch_sorted": torch_sorted}
    for _ in range(args.warmup):
        for fn in providers.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in providers}
    for _ in range(args.reps):
        for name, fn in providers.items():
            times[name].append(_time_once(fn))
    med = {name: statistics.median(ts) * 1e3 for name, ts in times.items()}
    cell = {
        "batch": b,
        "n": n,
        "k": k,
        "median_ms": med,
        "min_ms": {name: min(ts) * 1e3 for name, ts in times.items()},
        "speedup_vs_torch": med["torch"] / med["gvr"],
        "speedup_vs_torch_sorted": med["torch_sorted"] / med["gvr"],
        "exact": bool(exact),
        "torch_exact": bool(exact_torch),
        "validator_ms": check_s * 1e3,
    }
    logger.info(
        "b=%4d n=%7d K=%5d  gvr %8.3f ms  torch %8.3f ms  sorted %8.3f ms  x%.2f  exact=%s",
        b, n, k, med["gvr"], med["torch"], med["torch_sorted"], cell["speedup_vs_torch"], exact,
    )  # fmt: skip
    return cell


def _markdown(meta: dict, cells: list[dict]) -> str:
    lines = [
        "# CPU engine vs torch.topk (CPU)",
        "",
        f"- commit `{meta['commit']}`, {meta['date']}",
        f"- CPU: {meta['cpu_model']}, {meta['cpu_cores']} cores; numba {meta['numba']} "
        f"({meta['numba_threads']} threads, {meta['numba_threading_layer']}), torch "
        f"{meta['torch']} ({meta['torch_threads']} threads), numpy {meta['numpy']}",
        f"- {meta['input']}; {meta['statistic']}, {meta['repetitions']} repetitions after "
        f"{meta['warmup']} warm-up rounds; load average at the end "
        f"{', '.join(f'{x:.2f}' for x in meta['load_average_1_5_15min_at_end'])} "
        "(the machine is shared)",
        "- gvr: `cpu_engine.dense(x, k, out=, values=)` (indices + values, unsorted); torch: "
        "`torch.topk(x, k, sorted=False, out=)`; speedup = torch / gvr",
        "- exact: both answers checked by `gvr_reference.validate` before timing",
        "",
        "| batch | n | K | gvr (ms) | torch.topk unsorted (ms) | torch.topk sorted (ms) "
        "| speedup | exact |",
        "|---:|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    for c in cells:
        m = c["median_ms"]
        exact = "yes" if c["exact"] and c["torch_exact"] else "NO"
        lines.append(
            f"| {c['batch']} | {c['n']} | {c['k']} | {m['gvr']:.3f} | {m['torch']:.3f} | "
            f"{m['torch_sorted']:.3f} | {c['speedup_vs_torch']:.2f}x | {exact} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 32, 256])
    parser.add_argument("--n", type=int, nargs="+", default=[16384, 131072])
    parser.add_argument("--k", type=int, nargs="+", default=[512, 2048])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="threads for both providers")
    parser.add_argument("--out-dir", type=Path, default=OUT_DIR)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    if args.threads:
        numba.set_num_threads(args.threads)
        torch.set_num_threads(args.threads)
    cpu_engine.warmup()
    cells = [run_cell(b, n, k, args) for b in args.batch for n in args.n for k in args.k]
    meta = _metadata(args)
    result = {"benchmark": "cpu_engine_vs_torch_topk", "metadata": meta, "cells": cells}
    md = _markdown(meta, cells)
    if not args.no_write:
        args.out_dir.mkdir(parents=True, exist_ok=True)
        (args.out_dir / "cpu_engine.json").write_text(json.dumps(result, indent=2) + "\n")
        (args.out_dir / "cpu_engine.md").write_text(md)
        logger.info("wrote %s", args.out_dir / "cpu_engine.json")
    print(md)
    slow = [c for c in cells if c["speedup_vs_torch"] < 1.0]
    inexact = [c for c in cells if not (c["exact"] and c["torch_exact"])]
    return 1 if inexact else (2 if slow else 0)


if __name__ == "__main__":
    raise SystemExit(main())
