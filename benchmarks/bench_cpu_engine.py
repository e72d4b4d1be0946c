"""Time GVR's CPU top-K, as the dispatcher routes it, against ``torch.topk`` on the CPU.

Every cell uses the same gaussian rows (a fresh seeded draw per cell) for every provider. Every
answer is checked exact by the validator before anything is timed. Timings are taken after a
warm-up, alternating the providers repetition by repetition (so that load from other processes
falls on all alike), and the median is reported. Small cells get more repetitions (enough for
about ``--seconds`` of timing per provider, at least ``--reps``).

Providers:
- ``dispatch``: ``gvr_dispatch.topk(x, k, out=...)``, the public call on CPU tensors as the
  dispatcher serves it (its direct CPU path into the numba engine; ``gvr_dispatch.cpu.cpu_route``
  names the engine's method for the cell); int32 indices into a preallocated buffer;
- ``engine``: ``cpu_engine.dense(x, k, out=..., values=...)``, the numba engine alone through
  its checked numpy API (values too);
- ``torch``: ``torch.topk(x, min(k, n), sorted=False, out=...)``, the baseline of the speedups
  (a row of ``n <= k`` scores needs no selection, and ``torch.topk`` refuses ``k > n``).

``speedup = torch time / dispatch time``; above 1 the dispatcher's CPU path is faster.

Usage::

    python benchmarks/bench_cpu_engine.py                 # the full grid
    python benchmarks/bench_cpu_engine.py --batch 1 8 --n 4096 --reps 5 --no-write
    python benchmarks/bench_cpu_engine.py --name cpu_wide --batch 1 8 64 512 \
        --n 64 256 1024 4096 16384 65536 --k 1 8 64 512 2048 --seconds 0.2  # the wide sweep
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

import gvr_dispatch
import numba
import numpy as np
import torch
from gvr_dispatch import cpu
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
        "seconds_per_provider": args.seconds,
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


def _reps_for(fns, args: argparse.Namespace) -> int:
    """Repetitions giving about ``args.seconds`` of timing per provider (at least
    ``args.reps``, at most ``args.max_reps``), from one timed call of the slowest."""
    slowest = max(_time_once(fn) for fn in fns)
    return int(min(args.max_reps, max(args.reps, args.seconds / max(slowest, 1e-7))))


def run_cell(b: int, n: int, k: int, args: argparse.Namespace) -> dict:
    """Check and time one (batch, width, K) cell."""
    rng = np.random.default_rng([b, n, k, args.seed])
    x = rng.standard_normal((b, n), dtype=np.float32)
    xt = torch.from_numpy(x)
    kt = min(k, n)
    out = np.empty((b, k), np.int32)
    vals = np.empty((b, k), np.float32)
    d_out = torch.empty((b, k), dtype=torch.int32)
    t_vals = torch.empty((b, kt), dtype=torch.float32)
    t_idx = torch.empty((b, kt), dtype=torch.int64)
    route = cpu.cpu_route(b, n, k)

    def dispatch():
        gvr_dispatch.topk(xt, k, out=d_out)

    def engine():
        cpu_engine.dense(x, k, out=out, values=vals)

    def torch_topk():
        torch.topk(xt, kt, dim=-1, sorted=False, out=(t_vals, t_idx))

    dispatch()
    t0 = time.perf_counter()
    exact = _check_exact(x, k, d_out.numpy(), None, "dispatch")
    check_s = time.perf_counter() - t0
    engine()
    exact_engine = _check_exact(x, k, out, vals, "engine")
    torch_topk()
    exact_torch = _check_exact(x, kt, t_idx.numpy().astype(np.int32), t_vals.numpy(), "torch")

    providers = {"dispatch": dispatch, "engine": engine, "torch": torch_topk}
    for _ in range(args.warmup):
        for fn in providers.values():
            fn()
    reps = _reps_for(providers.values(), args)
    times: dict[str, list[float]] = {name: [] for name in providers}
    for _ in range(reps):
        for name, fn in providers.items():
            times[name].append(_time_once(fn))
    med = {name: statistics.median(ts) * 1e3 for name, ts in times.items()}
    cell = {
        "batch": b,
        "n": n,
        "k": k,
        "route": route,
        "repetitions": reps,
        "median_ms": med,
        "min_ms": {name: min(ts) * 1e3 for name, ts in times.items()},
        "speedup_vs_torch": med["torch"] / med["dispatch"],
        "engine_speedup_vs_torch": med["torch"] / med["engine"],
        "exact": bool(exact and exact_engine),
        "torch_exact": bool(exact_torch),
        "validator_ms": check_s * 1e3,
    }
    logger.info(
        "b=%3d n=%7d K=%5d %-5s dispatch %8.3f ms engine %8.3f ms torch %8.3f ms x%.2f (%d reps)",
        b, n, k, route, med["dispatch"], med["engine"], med["torch"], cell["speedup_vs_torch"],
        reps,
    )  # fmt: skip
    return cell


def _markdown(meta: dict, cells: list[dict]) -> str:
    slow = [c for c in cells if c["speedup_vs_torch"] < 1.0]
    lines = [
        "# GVR CPU top-K (as the dispatcher routes it) vs torch.topk (CPU)",
        "",
        f"- commit `{meta['commit']}`, {meta['date']}",
        f"- CPU: {meta['cpu_model']}, {meta['cpu_cores']} cores; numba {meta['numba']} "
        f"({meta['numba_threads']} threads, {meta['numba_threading_layer']}), torch "
        f"{meta['torch']} ({meta['torch_threads']} threads), numpy {meta['numpy']}",
        f"- {meta['input']}; {meta['statistic']}; at least {meta['repetitions']} repetitions "
        f"(about {meta['seconds_per_provider']} s per provider and cell) after "
        f"{meta['warmup']} warm-up rounds; load average at the end "
        f"{', '.join(f'{x:.2f}' for x in meta['load_average_1_5_15min_at_end'])}",
        "- dispatch: `gvr_dispatch.topk(x, k, out=)` (int32 indices, preallocated), the public "
        "call on CPU tensors (its direct path into the numba engine); route: the engine's "
        "method for the cell (`gvr_dispatch.cpu.cpu_route`: `identity` for n <= k, `radix`, "
        "`sampled`; `x pool` on the thread pool); engine: `cpu_engine.dense(x, k, out=, "
        "values=)`, the numba engine alone through its checked numpy API; torch: "
        "`torch.topk(x, min(k, n), sorted=False, out=)` (preallocated int64 indices and "
        "values)",
        "- **x torch = torch.topk time / dispatch time: above 1 GVR is faster, 2.00x means it "
        "takes half the time**; engine x torch = torch.topk time / engine time",
        "- exact: every answer checked by `gvr_reference.validate` before timing",
        f"- cells where dispatch is slower than torch.topk: {len(slow)} of {len(cells)}",
        "",
        "| batch | n | K | route | dispatch (ms) | engine (ms) | torch.topk (ms) | x torch "
        "| engine x torch | exact |",
        "|---:|---:|---:|:---|---:|---:|---:|---:|---:|:---:|",
    ]
    for c in cells:
        m = c["median_ms"]
        exact = "yes" if c["exact"] and c["torch_exact"] else "NO"
        lines.append(
            f"| {c['batch']} | {c['n']} | {c['k']} | {c['route']} | {m['dispatch']:.4f} | "
            f"{m['engine']:.4f} | {m['torch']:.4f} | {c['speedup_vs_torch']:.2f}x | "
            f"{c['engine_speedup_vs_torch']:.2f}x | {exact} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--n", type=int, nargs="+", default=[1024, 4096, 16384, 131072])
    parser.add_argument("--k", type=int, nargs="+", default=[512, 2048])
    parser.add_argument("--reps", type=int, default=15, help="fewest repetitions per cell")
    parser.add_argument("--max-reps", type=int, default=4001)
    parser.add_argument(
        "--seconds", type=float, default=0.5, help="timing per provider and cell (about)"
    )
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="threads for both providers")
    parser.add_argument("--out-dir", type=Path, default=OUT_DIR)
    parser.add_argument(
        "--name", default="cpu_engine", help="file stem of the results (.json and .md)"
    )
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    if args.threads:
        numba.set_num_threads(args.threads)
        torch.set_num_threads(args.threads)
    cpu_engine.warmup()
    gvr_dispatch.warmup(k=max(args.k), width=max(args.n), device="cpu", progress=False)
    cells = [run_cell(b, n, k, args) for b in args.batch for n in args.n for k in args.k]
    meta = _metadata(args)
    result = {"benchmark": "cpu_engine_vs_torch_topk", "metadata": meta, "cells": cells}
    md = _markdown(meta, cells)
    if not args.no_write:
        args.out_dir.mkdir(parents=True, exist_ok=True)
        (args.out_dir / f"{args.name}.json").write_text(json.dumps(result, indent=2) + "\n")
        (args.out_dir / f"{args.name}.md").write_text(md)
        logger.info("wrote %s", args.out_dir / f"{args.name}.json")
    print(md)
    slow = [c for c in cells if c["speedup_vs_torch"] < 1.0]
    inexact = [c for c in cells if not (c["exact"] and c["torch_exact"])]
    return 1 if inexact else (2 if slow else 0)


if __name__ == "__main__":
    raise SystemExit(main())
