"""Side-by-side top-K benchmarks on one GPU: GVR, torch.topk, and FlashInfer where installed.

    python benchmarks/bench_topk.py --sets decode-grid,graph,mtp,prefill,real,adversarial,host \
        --out benchmarks/results/h200

Every provider runs on the same tensors. Each result is checked exact (order keys against an
integer ``torch.topk`` of the keys, see ``gvr_kernels.testing.check_windows``) before it is
timed; an inexact provider is reported as such and not timed, and the script exits with
status 1 if a provider that claims exactness returned an inexact row. Timings: cold L2 (a
buffer twice the L2 size is rewritten before every repetition), CUDA events around the call,
median / p10 / p90 of ``--reps`` repetitions; the ``graph`` set times CUDA-graph replays.

Providers:
  gvr       the public API (``gvr_dispatch.topk_decode`` / ``topk_prefill`` / ``topk``)
  gvr-raw   the compiled kernel called directly with the routed launch (no validation)
  torch     ``torch.topk(sorted=False)`` on rows masked to ``-inf`` past their length, indices
            past the length replaced by ``-1`` (the masking is not timed)
  flashinfer ``flashinfer.top_k`` on full rows (only where importable)
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

SETS = ("decode-grid", "graph", "mtp", "prefill", "real", "adversarial", "host")
GRID_K = (512, 1024, 2048)
GRID_N = (4096, 16384, 65536, 131072, 262144)
GRID_B = (1, 8, 32, 128, 512)
ADVERSARIAL = (
    "quantized",
    "two_valued",
    "constant",
    "hidden_peaks",
    "position_skew",
    "pos_inf",
    "many_pos_inf",
    "neg_inf",
    "nan",
)


@dataclass
class Case:
    """One benchmark input: logits plus the row windows of the call."""

    set: str
    mode: str  # decode | prefill | dense
    k: int
    logits: torch.Tensor
    starts: torch.Tensor
    lengths: torch.Tensor
    kv_lens: torch.Tensor | None = None
    row_starts: torch.Tensor | None = None
    row_ends: torch.Tensor | None = None
    next_n: int = 1
    cr: int = 1
    family: str = "gaussian"
    max_seq_len: int | None = None
    label: dict = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return int(self.logits.shape[0])


@dataclass
class Record:
    set: str
    provider: str
    timing: str  # eager | graph | host
    k: int
    rows: int
    n: int
    next_n: int
    compress_ratio: int
    family: str
    exact: bool | None
    median_us: float | None = None
    p10_us: float | None = None
    p90_us: float | None = None
    gbps: float | None = None
    speedup_vs_torch: float | None = None
    note: str = ""


# ----------------------------------------------------------------------------- providers
def gvr_call(case: Case, out: torch.Tensor):
    import gvr_dispatch as gvr

    if case.mode == "decode":
        return lambda: gvr.topk_decode(
            case.logits,
            case.kv_lens,
            case.k,
            next_n=case.next_n,
            compress_ratio=case.cr,
            out=out,
            max_seq_len=case.max_seq_len,
        )
    if case.mode == "prefill":
        return lambda: gvr.topk_prefill(
            case.logits, case.row_starts, case.row_ends, case.k, out=out
        )
    return lambda: gvr.topk(case.logits, case.k, out=out)


def gvr_raw_call(case: Case, out: torch.Tensor):
    """The routed compiled kernel called directly: what the public API adds on top of it is
    validation and the launch-cache lookup."""
    from gvr_kernels.abi import KernelArgs
    from gvr_kernels.routing import route_static

    n_env = case.max_seq_len // case.cr if case.max_seq_len else case.logits.shape[1]
    mode = {"decode": "decode", "prefill": "prefill", "dense": "full"}[case.mode]
    route = route_static(
        _spec(), rows=case.rows, n_env=min(n_env, case.logits.shape[1]), k=case.k, mode=mode
    )
    cfg = route.config
    fn = _aot_kernels().get(cfg)
    if fn is None:
        from gvr_kernels.compile import compile_config

        fn = compile_config(cfg)
    dev = case.logits.device
    ws = torch.zeros(max(route.workspace_words, 4), dtype=torch.int32, device=dev).view(
        torch.uint32
    )
    dummy = torch.zeros(1, dtype=torch.int32, device=dev)
    val = torch.zeros((1, 1), dtype=torch.float32, device=dev)
    a = case.kv_lens if case.mode == "decode" else case.row_starts
    b = case.row_ends if case.mode == "prefill" else None
    args = KernelArgs(
        logits=case.logits,
        lens_a=dummy if a is None else a,
        lens_b=dummy if b is None else b,
        out=out,
        values=val,
        workspace=ws,
        paths=dummy,
        k=case.k,
        next_n=case.next_n,
        cr_shift=int(math.log2(case.cr)),
        parts=route.parts,
    )
    return lambda: fn(*args)


_AOT: dict | None = None


def _spec():
    """The device as routing sees it (read from torch, so no dispatcher is needed)."""
    from gvr_kernels.spec import spec_from_properties

    return spec_from_properties(torch.cuda.get_device_properties(0))


def _aot_kernels() -> dict:
    """Kernels exported ahead of time (``GVR_AOT_DIR``), for runs without the DSL compiler."""
    global _AOT
    if _AOT is None:
        from gvr_kernels.aot import load_library

        folder = os.environ.get("GVR_AOT_DIR")
        _AOT = load_library(folder) if folder else {}
    return _AOT


def masked_logits(case: Case) -> torch.Tensor:
    """Rows as ``torch.topk`` users feed them: a contiguous copy of each row's window, padded
    with ``-inf``."""
    w = max(int(case.lengths.max()), case.k)
    pos = torch.arange(w, device=case.logits.device)
    cols = (case.starts[:, None] + pos[None, :]).clamp(max=case.logits.shape[1] - 1)
    x = torch.gather(case.logits, 1, cols)
    return x.masked_fill(pos[None, :] >= case.lengths[:, None], -math.inf).contiguous()


def torch_call(case: Case, out: torch.Tensor):
    x = masked_logits(case)
    lengths = case.lengths[:, None]

    def run():
        return torch.topk(x, case.k, dim=1, sorted=False)

    def finish(res):
        idx = res.indices
        out.copy_(torch.where(idx < lengths, idx, torch.full_like(idx, -1)).to(torch.int32))

    return run, finish


def flashinfer_call(case: Case, out: torch.Tensor):
    import flashinfer  # noqa: F401  (optional)

    if case.mode != "dense" and not bool((case.lengths == case.logits.shape[1]).all()):
        return None
    x = case.logits.contiguous()

    def run():
        return flashinfer.top_k(x, case.k)

    def finish(res):
        out.copy_(res[1].to(torch.int32))

    return run, finish


# ----------------------------------------------------------------------------- timing
class Timer:
    def __init__(self, reps: int):
        props = torch.cuda.get_device_properties(0)
        l2 = getattr(props, "L2_cache_size", 64 << 20)
        self.flush = torch.empty(max(2 * l2, 256 << 20), dtype=torch.uint8, device="cuda")
        self.reps = reps

    def cold(self, fn) -> tuple[float, float, float]:
        times = []
        for _ in range(self.reps):
            self.flush.zero_()
            s = torch.cuda.Event(enable_timing=True)
            e = torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e) * 1e3)
        q = statistics.quantiles(times, n=10)
        return statistics.median(times), q[0], q[-1]

    def graph(self, fn) -> tuple[float, float, float]:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        return self.cold(g.replay)


# ----------------------------------------------------------------------------- cases
def decode_case(set_name, k, b, width, g, *, next_n=1, cr=1, family="gaussian", full=True):
    from gvr_kernels.testing import families

    rows = b * next_n
    alloc = -(-width // 4) * 4
    logits = families(family, rows, alloc, k, g)[:, :width]
    if full:
        kv = torch.full((b,), width * cr + next_n - 1, dtype=torch.int32, device="cuda")
    else:
        kv = torch.randint(
            width * cr // 2,
            width * cr + next_n,
            (b,),
            generator=g,
            device="cuda",
            dtype=torch.int32,
        )
    r = torch.arange(rows, device="cuda")
    lengths = (
        (kv.to(torch.int64)[r // next_n] - next_n + r % next_n + 1).clamp(min=0) // cr
    ).clamp(max=width)
    return Case(
        set_name,
        "decode",
        k,
        logits,
        torch.zeros_like(lengths),
        lengths,
        kv_lens=kv,
        next_n=next_n,
        cr=cr,
        family=family,
        max_seq_len=width * cr + next_n - 1,
    )


def prefill_case(set_name, k, rows, ctx, g):
    """A causal prefill chunk: row i sees ``[0, ctx - rows + i + 1)`` of its sequence; rows of
    two sequences share the logits width (starts at 0 and at ``ctx // 2``)."""
    from gvr_kernels.testing import families

    width = -(-ctx // 4) * 4
    logits = families("gaussian", rows, width, k, g)
    i = torch.arange(rows, device="cuda")
    starts = torch.where(i % 2 == 0, 0, 3).to(torch.int64)
    ends = torch.clamp(ctx - rows + i + 1, min=0)
    ends = torch.maximum(ends, starts)
    return Case(
        set_name,
        "prefill",
        k,
        logits,
        starts,
        ends - starts,
        row_starts=starts.to(torch.int32),
        row_ends=ends.to(torch.int32),
    )


def real_cases(k, args):
    """Real indexer rows: the shared Gemma-3 rows when a folder is given, else the committed
    sample's scores."""
    cases = []
    folder = Path(args.real_rows) if args.real_rows else None
    if folder and folder.is_dir():
        from safetensors.torch import load_file

        for f in sorted(folder.glob("*.safetensors")):
            d = load_file(str(f))
            logits = d["logits"].cuda()
            lengths = d["lengths"].to(torch.int64).cuda()
            width = logits.shape[1]
            if width % 4:
                continue
            rows = logits.shape[0]
            kv = d["lengths"].to(torch.int32).cuda()
            cases.append(
                Case(
                    "real",
                    "decode",
                    k,
                    logits,
                    torch.zeros_like(lengths),
                    lengths,
                    kv_lens=kv,
                    family=f.stem,
                    max_seq_len=width,
                    label={"file": f.name, "rows": rows},
                )
            )
    else:
        from gvr_reference.realdata import indexer_scores, load_sample

        s = load_sample()
        logits, kv = indexer_scores(s, s.positions, next_n=1, compress_ratio=1)
        lg = torch.from_numpy(logits).cuda()
        kvt = torch.from_numpy(kv).cuda()
        lengths = kvt.to(torch.int64)
        cases.append(
            Case(
                "real",
                "decode",
                k,
                lg,
                torch.zeros_like(lengths),
                lengths,
                kv_lens=kvt,
                family="sample",
                max_seq_len=lg.shape[1],
            )
        )
    return cases


def build_cases(set_name: str, g, args):
    if set_name in ("decode-grid", "graph", "host"):
        ks = GRID_K if set_name != "host" else (512, 2048)
        ns = GRID_N if set_name != "host" else (4096,)
        bs = GRID_B if set_name != "host" else (1,)
        if args.quick:
            ns, bs = (16384, 262144), (1, 128)
        for k in ks:
            for n in ns:
                if n <= k:
                    continue
                for b in bs:
                    yield decode_case(set_name, k, b, n, g)
    elif set_name == "mtp":
        for k in (512, 2048):
            for next_n in (2, 4):
                for cr in (1, 4):
                    for b in (1, 32, 128):
                        width = 262144 // cr
                        if width <= k:
                            continue
                        yield decode_case("mtp", k, b, width, g, next_n=next_n, cr=cr, full=False)
    elif set_name == "prefill":
        for k in (512, 2048):
            for rows, ctx in ((128, 16384), (1024, 16384), (1024, 65536), (4096, 32768)):
                yield prefill_case("prefill", k, rows, ctx, g)
    elif set_name == "real":
        for k in GRID_K:
            yield from real_cases(k, args)
    elif set_name == "adversarial":
        for k in (512, 2048):
            for fam in ADVERSARIAL:
                for n in (131072, 262144):
                    for b in (1, 32):
                        yield decode_case("adversarial", k, b, n, g, family=fam)


# ----------------------------------------------------------------------------- running
def bytes_read(case: Case) -> int:
    return int(case.lengths.sum()) * 4


def run_case(case: Case, timer: Timer, providers, records, failures):
    from gvr_kernels.testing import check_windows

    n = int(case.lengths.max()) if case.rows else 0
    mine: list[Record] = []
    for name in providers:
        if case.set == "host" and name not in ("gvr", "gvr-raw"):
            continue
        out = torch.full((case.rows, case.k), 0x7FFFFFFF, dtype=torch.int32, device="cuda")
        base = dict(
            set=case.set,
            provider=name,
            k=case.k,
            rows=case.rows,
            n=n,
            next_n=case.next_n,
            compress_ratio=case.cr,
            family=case.family,
        )
        finish = None
        try:
            if name == "gvr":
                fn = gvr_call(case, out)
            elif name == "gvr-raw":
                fn = gvr_raw_call(case, out)
            elif name == "torch":
                fn, finish = torch_call(case, out)
            else:
                made = flashinfer_call(case, out)
                if made is None:
                    continue
                fn, finish = made
        except ImportError as exc:
            mine.append(Record(timing="eager", exact=None, note=f"not importable: {exc}", **base))
            continue
        res = fn()
        if finish is not None:
            finish(res)
        torch.cuda.synchronize()
        exact = bool(check_windows(case.logits, case.starts, case.lengths, case.k, out).all())
        if not exact:
            failures.append(f"{name} {case.set} k={case.k} rows={case.rows} n={n}")
            mine.append(Record(timing="eager", exact=False, note="inexact: not timed", **base))
            continue
        if case.set == "host":
            mine.append(host_record(fn, base))
            continue
        timing = "graph" if case.set == "graph" else "eager"
        try:
            med, p10, p90 = timer.graph(fn) if timing == "graph" else timer.cold(fn)
        except Exception as exc:  # a provider that cannot be captured
            mine.append(Record(timing=timing, exact=True, note=f"not timed: {exc}", **base))
            continue
        mine.append(
            Record(
                timing=timing,
                exact=True,
                median_us=med,
                p10_us=p10,
                p90_us=p90,
                gbps=bytes_read(case) / (med * 1e3),
                **base,
            )
        )
    ref = [r.median_us for r in mine if r.provider == "torch" and r.median_us]
    for rec in mine:
        if ref and rec.median_us:
            rec.speedup_vs_torch = ref[0] / rec.median_us
    records.extend(mine)


def host_record(fn, base) -> Record:
    """Host time per eager call: wall clock of back-to-back calls of a tiny launch."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    reps = 200
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    us = (t1 - t0) / reps * 1e6
    return Record(timing="host", exact=True, median_us=us, note="host time per call", **base)


def metadata() -> dict:
    props = torch.cuda.get_device_properties(0)
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": props.name,
        "sm_count": props.multi_processor_count,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
    }
    try:
        meta["driver"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        meta["driver"] = None
    try:
        import cutlass

        meta["cutlass_dsl"] = getattr(cutlass, "__version__", None)
    except ImportError:
        meta["cutlass_dsl"] = None
    commit = os.environ.get("GVR_COMMIT")
    if not commit:
        try:
            commit = (
                subprocess.run(
                    ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
                ).stdout.strip()
                or None
            )
        except (OSError, subprocess.SubprocessError):
            commit = None
    meta["commit"] = commit
    return meta


def print_table(records):
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        for r in records:
            print(r)
        return
    t = Table(title="top-K benchmark (us, cold L2)")
    for col in (
        "set",
        "provider",
        "timing",
        "k",
        "rows",
        "n",
        "nn",
        "cr",
        "family",
        "median",
        "GB/s",
        "x torch",
        "exact",
    ):
        t.add_column(col)
    for r in records:
        t.add_row(
            r.set,
            r.provider,
            r.timing,
            str(r.k),
            str(r.rows),
            str(r.n),
            str(r.next_n),
            str(r.compress_ratio),
            r.family,
            "-" if r.median_us is None else f"{r.median_us:.1f}",
            "-" if r.gbps is None else f"{r.gbps:.0f}",
            "-" if r.speedup_vs_torch is None else f"{r.speedup_vs_torch:.2f}",
            str(r.exact) + (f" {r.note}" if r.note else ""),
        )
    Console(width=200).print(t)


def summary(records) -> dict:
    out = {}
    for timing in ("eager", "graph"):
        sp = [
            r.speedup_vs_torch
            for r in records
            if r.set in ("decode-grid", "graph")
            and r.provider == "gvr"
            and r.timing == timing
            and r.speedup_vs_torch
        ]
        if sp:
            out[f"decode_grid_{timing}"] = {
                "cells": len(sp),
                "geomean_speedup": math.exp(sum(map(math.log, sp)) / len(sp)),
                "min_speedup": min(sp),
                "max_speedup": max(sp),
            }
    b1 = [
        r.median_us
        for r in records
        if r.set == "decode-grid" and r.provider == "gvr" and r.rows == 1 and r.n == 262144
    ]
    if b1:
        out["b1_n262144_max_us"] = max(b1)
    host = {f"{r.provider}_k{r.k}": r.median_us for r in records if r.timing == "host"}
    if host:
        out["host_us_per_call"] = host
    return out


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--sets", default="decode-grid,graph,host", help=f"comma-separated, from {','.join(SETS)}"
    )
    ap.add_argument("--providers", default="gvr,gvr-raw,torch,flashinfer")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--real-rows", default=None, help="folder of real score-row safetensors")
    ap.add_argument("--out", default=None, help="folder for the JSON and plots")
    ap.add_argument("--tag", default="bench", help="file name stem")
    ap.add_argument("--quick", action="store_true", help="a few cells per set")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_topk needs a CUDA device", file=sys.stderr)
        return 2
    sets = [s for s in args.sets.split(",") if s]
    bad = [s for s in sets if s not in SETS]
    if bad:
        ap.error(f"unknown sets {bad}; known: {SETS}")
    providers = [p for p in args.providers.split(",") if p]
    timer = Timer(args.reps)
    g = torch.Generator(device="cuda").manual_seed(args.seed)
    records: list[Record] = []
    failures: list[str] = []
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover

        def tqdm(x, **_):
            return x

    for set_name in sets:
        for case in tqdm(list(build_cases(set_name, g, args)), desc=set_name, file=sys.stderr):
            run_case(case, timer, providers, records, failures)
            del case
    print_table(records)
    result = {
        "metadata": metadata(),
        "summary": summary(records),
        "records": [asdict(r) for r in records],
        "failures": failures,
    }
    print(json.dumps(result["summary"], indent=1))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{args.tag}.json").write_text(json.dumps(result, indent=1))
        try:
            from plots import make_plots

            make_plots(result, out, args.tag)
        except Exception as exc:  # plots are a convenience; the JSON is the record
            print(f"plots skipped: {exc}", file=sys.stderr)
    if failures:
        print("INEXACT:", *failures, sep="\n  ", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
