"""The DSA decode pipeline on real input, every step checked: ``python -m gvr_integration.demo``.

For each configuration (K, next_n, compress ratio, head weights) the demo decodes every stored
query position of the real sample (``gvr_reference.realdata``) once, in steps of ``--batch``
requests that each advance ``next_n`` positions per step (see
:func:`~gvr_integration.pipeline.decode_schedule`): lightning-indexer scores, GVR top-K, the
oracle's validator on the selection, sparse attention over it, and the same attention over
``torch.topk``'s selection. It reports per configuration: steps and rows, row lengths, exact
steps, time per top-K call for GVR and for ``torch.topk`` on the same scores, and the largest
attention difference.

- CPU (no GPU, or ``--device cpu``): CPU tensors, the numba CPU engine.
- CUDA: the kernels, twice per configuration: eager calls, then a CUDA graph captured once
  (after ``gvr_dispatch.warmup`` with ``max_seq_len``) and replayed every step after writing
  the step's scores and ``kv_lens`` into its static buffers.

Then the long-row part, the regime the library is for (indexer rows of 65,536-262,144 scores):
``gvr_dispatch.topk`` against ``torch.topk`` on rows built from the sample's real score rows
(the valid scores of consecutive query positions, concatenated; each long row starts at
another offset, and rows longer than the ~260K scores the sample holds wrap around), and, when
the shared 131K-token rows are present (``GVR_REAL_ROWS``, or
``../shared/data/real-rows/gemma3-270m-l5-kjv-131k.safetensors`` from the working
directory), on those. Every answer is checked by the validator.

Progress goes to stderr as it happens (``-q`` silences it, ``-v`` adds the library's logs);
the report goes to stdout. ``x torch`` in the tables is ``torch.topk`` time / GVR time per
call: above 1 GVR is faster.

Exit status 0 when every step of every run and every long-row call is exact and attention
agrees with the ``torch.topk`` reference within ``1e-4 * max|V|`` on rows with the same
selected set; else 1.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import statistics
import sys
import time
from pathlib import Path

import gvr_dispatch
import numpy as np
import torch
from gvr_dispatch.validation import KERNEL_MAX_K
from gvr_reference import validate
from gvr_reference.realdata import indexer_scores, load_sample

from . import ops
from .graph import CapturedDecodeTopK
from .pipeline import DecodeConfig, DSADecodePipeline, decode_schedule
from .report import ConfigResult, DemoReport, LongRowResult
from .timing import time_per_call

#: The sample by name or path, loaded once per process: the option check loads it to refuse
#: a sample that cannot be read, and the run uses the same object (read only).
_load_sample = functools.lru_cache(maxsize=4)(load_sample)

__all__ = ["main", "run", "default_configs", "long_rows_from_sample", "run_long_rows"]

logger = logging.getLogger("gvr.integration.demo")

ATTN_REL_TOL = 1e-4
SHARED_ROWS = Path("..") / "shared" / "data" / "real-rows" / "gemma3-270m-l5-kjv-131k.safetensors"


def long_rows_from_sample(sample, width: int, rows: int, weights: str = "signed") -> np.ndarray:
    """float32 ``[rows, width]`` of real scores: the valid part of every score row of the
    sample (one per stored query position, ``weights`` head weights), concatenated; row ``j``
    starts ``j / rows`` of the way into that sequence and wraps around at its end."""
    logits, lens = indexer_scores(sample, next_n=1, compress_ratio=1, weights=weights)
    flat = np.concatenate([logits[i, : int(n)] for i, n in enumerate(lens)])
    out = np.empty((rows, width), np.float32)
    for j in range(rows):
        start = (j * flat.shape[0]) // rows
        out[j] = flat[(start + np.arange(width)) % flat.shape[0]]
    return out


def _shared_rows() -> tuple[np.ndarray, np.ndarray] | None:
    """The shared 131K-token rows (``logits``, ``lengths``) when the file is present."""
    path = Path(os.environ.get("GVR_REAL_ROWS", SHARED_ROWS))
    if not path.is_file():
        return None
    from safetensors.numpy import load_file

    d = load_file(str(path))
    return d["logits"].astype(np.float32, copy=False), d["lengths"].astype(np.int32)


def _median_us(fn, reps: int, device) -> float:
    return statistics.median(time_per_call(fn, 1, device) for _ in range(reps)) * 1e6


def run_long_rows(x_np, lengths_np, source: str, ks, device, reps: int) -> list[LongRowResult]:
    """``gvr_dispatch.topk`` and ``torch.topk`` on long rows (``lengths_np``: valid scores per
    row, or None for whole rows), each K checked by the validator, then timed."""
    x = torch.from_numpy(np.ascontiguousarray(x_np)).to(device)
    lengths = None if lengths_np is None else torch.from_numpy(lengths_np).to(device)
    rows, width = x_np.shape
    results = []
    for k in ks:
        if k > width:
            continue
        res = LongRowResult(source, rows, width, k)
        out = torch.empty((rows, k), dtype=torch.int32, device=device)
        gvr_dispatch.topk(x, k, lengths, out=out)
        report = validate.check_dense(x_np, k, out.cpu().numpy(), lengths=lengths_np)
        res.exact = bool(report.ok)
        if not report.ok:
            res.first_failure = report.summary()
        res.gvr_us = _median_us(
            lambda k=k, out=out: gvr_dispatch.topk(x, k, lengths, out=out), reps, device
        )
        res.torch_topk_us = _median_us(lambda k=k: torch.topk(x, k, sorted=False), reps, device)
        results.append(res)
    return results


def default_configs(
    ks, next_ns, ratios, weights, batch, n_tokens: int, sample_ratio: int
) -> list[DecodeConfig]:
    """Every combination whose K fits the cache width (``n_tokens // compress_ratio``)."""
    configs = []
    usable = []
    for cr in ratios:
        if cr in (1, sample_ratio):
            usable.append(cr)
        else:
            logger.warning(
                "skipping compress_ratio %d: the sample stores 1 and %d", cr, sample_ratio
            )
    for w in weights:
        for cr in usable:
            for n in next_ns:
                for k in ks:
                    if k > n_tokens // cr:
                        continue
                    configs.append(DecodeConfig(k, n, cr, w, batch))
    return configs


class _TimedSelector:
    """A ``select(logits, kv_lens)`` that also times the call and ``torch.topk`` per step."""

    def __init__(self, pipe: DSADecodePipeline, result: ConfigResult, reps: int, graph=None):
        self.pipe, self.result, self.reps, self.graph = pipe, result, reps, graph
        c = pipe.config
        self.out = torch.empty((c.rows, c.k), dtype=torch.int32, device=pipe.device)

    def _eager(self, logits, kv_lens):
        c = self.pipe.config
        return ops.topk_decode(
            logits,
            kv_lens,
            out=self.out,
            next_n=c.next_n,
            compress_ratio=c.compress_ratio,
            max_seq_len=self.pipe.max_seq_len,
        )

    def __call__(self, logits, kv_lens):
        device, k = self.pipe.device, self.pipe.config.k
        if self.graph is None:
            idx = self._eager(logits, kv_lens)
            t_gvr = time_per_call(lambda: self._eager(logits, kv_lens), self.reps, device)
        else:
            idx = self.graph(logits, kv_lens)
            t_gvr = time_per_call(self.graph.graph.replay, self.reps, device)
        t_ref = time_per_call(
            lambda: torch.topk(logits, k, dim=-1, sorted=False), self.reps, device
        )
        self.result.gvr_us_steps.append(t_gvr * 1e6)
        self.result.torch_us_steps.append(t_ref * 1e6)
        return idx


def run_config(sample, cfg: DecodeConfig, device, *, steps, reps, mode) -> ConfigResult:
    """Run one configuration in one mode (``"eager"`` or ``"graph"``) over its schedule."""
    pipe = DSADecodePipeline(sample, cfg, device)
    res = ConfigResult(cfg.k, cfg.next_n, cfg.compress_ratio, cfg.weights, cfg.batch, mode)
    res.attn_tolerance = ATTN_REL_TOL * float(pipe.values.abs().max())
    graph = None
    if mode == "graph":
        graph = CapturedDecodeTopK(
            cfg.rows,
            pipe.width,
            cfg.k,
            next_n=cfg.next_n,
            compress_ratio=cfg.compress_ratio,
            max_seq_len=pipe.max_seq_len,
            device=pipe.device,
        )
    select = _TimedSelector(pipe, res, reps, graph)
    lo, hi = np.iinfo(np.int64).max, 0
    for groups in decode_schedule(len(sample.positions), cfg.next_n, cfg.batch, steps):
        r = pipe.step(groups, select)
        res.steps += 1
        res.rows_per_step = r.rows
        res.rows_total += r.rows
        lo, hi = min(lo, r.min_len), max(hi, r.max_len)
        res.exact_steps += int(r.exact)
        if not r.exact and res.first_failure is None:
            res.first_failure = r.summary
        res.rows_same_set += r.rows_same_set
        res.tie_rows += r.tie_rows
        res.attn_max_abs_diff = max(res.attn_max_abs_diff, r.attn_max_abs_diff)
        res.tie_attn_max_abs_diff = max(res.tie_attn_max_abs_diff, r.tie_attn_max_abs_diff)
    res.min_len, res.max_len = int(lo), int(hi)
    res.finish()
    return res


def run(args: argparse.Namespace) -> DemoReport:
    """Run every configuration the arguments ask for and return the report."""
    t0 = time.perf_counter()

    def say(msg, *a):
        logger.info("[%6.1f s] " + msg, time.perf_counter() - t0, *a)

    if args.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(args.device)
    torch.set_float32_matmul_precision("highest")
    say("loading the real sample")
    sample = _load_sample(args.sample)
    say(
        "sample %s: %d tokens, %d decode queries",
        sample.name,
        sample.n_tokens,
        len(sample.positions),
    )
    if device.type == "cuda":
        engine = f"GVR kernels, {torch.cuda.get_device_name(device)}"
        modes = ["eager"] if args.no_graph else ["eager", "graph"]
        say("CUDA: each configuration compiles (or loads from the cache) its kernels first")
    else:
        engine = "numba CPU engine"
        modes = ["eager"]
        say(
            "preparing the numba CPU engine: the first run in an environment compiles it "
            "(about 10-60 s, once; cached on disk afterwards)"
        )
        t = time.perf_counter()
        gvr_dispatch.warmup(
            k=max(args.k), max_seq_len=sample.n_tokens, device="cpu", progress=False
        )
        say("CPU engine ready in %.1f s", time.perf_counter() - t)
    report = DemoReport(
        device=str(device), engine=engine, sample=sample.name, torch_version=torch.__version__
    )
    configs = default_configs(
        args.k,
        args.next_n,
        args.compress_ratio,
        args.weights,
        args.batch,
        sample.n_tokens,
        sample.compress_ratio,
    )
    runs = len(configs) * len(modes)
    say("decode pipeline: %d runs (configurations x modes), every step checked", runs)
    i = 0
    for cfg in configs:
        for mode in modes:
            i += 1
            res = run_config(sample, cfg, device, steps=args.steps, reps=args.reps, mode=mode)
            say(
                "[%d/%d] %s %s: %d/%d steps exact, GVR %.1f us, torch.topk %.1f us per call",
                i,
                runs,
                cfg.label(),
                mode,
                res.exact_steps,
                res.steps,
                res.gvr_us,
                res.torch_topk_us,
            )
            report.results.append(res)
    if args.long_rows:
        sources = []
        for width in args.long_rows:
            x = long_rows_from_sample(sample, width, args.long_batch)
            sources.append((x, None, "sample, concatenated"))
        shared = _shared_rows()
        if shared is not None:
            sources.append((shared[0], shared[1], "shared 131K rows"))
        else:
            say("shared 131K rows not found (GVR_REAL_ROWS or %s); skipping them", SHARED_ROWS)
        for x, lengths, source in sources:
            say("long rows (%s): %d x %d, K %s", source, *x.shape, args.k)
            over = [k for k in args.k if k > x.shape[1]]
            if over:
                say("  K %s skipped: more than the %d scores a row holds", over, x.shape[1])
            found = run_long_rows(x, lengths, source, args.k, device, max(3, 2 * args.reps))
            for r in found:
                say(
                    "  K=%d: %s, GVR %.1f us, torch.topk %.1f us",
                    r.k,
                    "exact" if r.exact else "NOT EXACT",
                    r.gvr_us,
                    r.torch_topk_us,
                )
            report.long_rows.extend(found)
    report.seconds = time.perf_counter() - t0
    say("done")
    return report


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m gvr_integration.demo",
        description="DSA decode pipeline (indexer -> GVR top-K -> sparse attention) on the "
        "real sample, every step checked against the oracle.",
    )
    p.add_argument("--device", default="auto", help="auto (CUDA if present), cpu or cuda[:i]")
    p.add_argument("--k", type=int, nargs="+", default=[512, 1024, 2048], help="top-K sizes")
    p.add_argument("--next-n", type=int, nargs="+", default=[1, 2], help="rows per request")
    p.add_argument(
        "--compress-ratio", type=int, nargs="+", default=[1, 4], help="1 and/or the sample's"
    )
    p.add_argument(
        "--weights", nargs="+", default=["positive", "signed"], choices=["positive", "signed"]
    )
    p.add_argument("--batch", type=int, default=4, help="requests per decode step")
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help="steps per run (default: enough to decode every stored position once)",
    )
    p.add_argument("--reps", type=int, default=5, help="timed calls per step")
    p.add_argument("--sample", default=None, help="sample name or .safetensors path")
    p.add_argument("--no-graph", action="store_true", help="CUDA: skip the CUDA-graph runs")
    p.add_argument(
        "--long-rows",
        type=int,
        nargs="*",
        default=[65536, 131072, 262144],
        help="lengths of the long-row part (none: skip it)",
    )
    p.add_argument("--long-batch", type=int, default=4, help="rows per long-row call")
    p.add_argument("--json", metavar="PATH", help="also write the report as JSON")
    g = p.add_mutually_exclusive_group()
    g.add_argument("-v", "--verbose", action="store_true", help="also show the library's logs")
    g.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    args = p.parse_args(argv)
    _check_args(p, args)
    return args


def _check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse values no run can use, naming the option (``p.error``: usage and exit 2)."""
    bad_k = [k for k in args.k if not 1 <= k <= KERNEL_MAX_K]  # (the kernels' K, DSA's range)
    if bad_k:
        p.error(f"--k must be in [1, {KERNEL_MAX_K}], got {bad_k}")
    for name in ("next_n", "long_rows"):
        bad = [v for v in getattr(args, name) if v < 1]
        if bad:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {bad}")
    bad_cr = [c for c in args.compress_ratio if c < 1 or c & (c - 1)]
    if bad_cr:
        p.error(f"--compress-ratio must be a power of two, got {bad_cr}")
    try:
        sample = _load_sample(args.sample)
    except Exception as e:  # missing, unreadable or not a sample file (safetensors' own errors)
        p.error(f"--sample {args.sample!r}: {e}")
    off = [c for c in args.compress_ratio if c not in (1, sample.compress_ratio)]
    if off:
        p.error(
            f"--compress-ratio must be 1 or the sample's {sample.compress_ratio} "
            f"({sample.name} stores those two), got {off}"
        )
    for name in ("batch", "reps", "long_batch", "steps"):
        v = getattr(args, name)
        if v is not None and v < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {v}")
    if args.device != "auto":
        try:
            device = torch.device(args.device)
        except RuntimeError:
            p.error(f"--device must be auto, cpu or cuda[:i], got {args.device!r}")
        if device.type not in ("cpu", "cuda"):
            p.error(f"--device must be auto, cpu or cuda[:i], got {args.device!r}")
        if device.type == "cuda" and not torch.cuda.is_available():
            p.error(f"--device {args.device}: no CUDA device is available (use cpu or auto)")


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(message)s",
    )
    logger.setLevel(logging.WARNING if args.quiet else logging.INFO)
    report = run(args)
    report.render()
    if args.json:
        path = report.write_json(args.json)
        print(f"report written to {path}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
