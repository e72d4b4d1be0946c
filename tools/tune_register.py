"""Tune table of the register-resident family against the streaming route (run on the GPU).

    python tools/tune_register.py --out results/tune_register.json [--dtype bfloat16]

For every (K, n, batch) cell of a grid of gaussian rows (in ``--dtype``), times each
register configuration that holds the row (cold L2, CUDA events, median) and the streaming
family's route, after checking each result exact. 16-bit rows try each float32 shape with half
the vectors (the same register slots). The routing rules in ``gvr_kernels.routing`` are read
off this table (``benchmarks/results/h200/tune_register.json``).

``--lengths`` sets the rows' lengths in each cell's arena of ``n`` scores: ``full`` (every row
``n``, the default), ``short`` (uniform in ``[K + 1, n / 8]``: a launch whose rows are all far
shorter than its envelope, where loads issued before the length read bytes no row needs) or
``ragged`` (serving-like, ``benchmarks/bench_topk.ragged_lengths``).

``--stream-variants`` adds streaming-family launches of one CTA a row beside the register rows
(``u8``: the cell's streaming route with eight vectors a thread a tile, ``StreamingConfig.unroll``;
``t512``: the 512-thread core the streaming family routes past the SMs, at this cell's rows;
``t512u8``: both), e.g. for the shape gvr_2 runs at b = 64 / 128, n = 12,288-16,384 (its
streaming kernel, 512 threads, eight vectors a thread a tile, two CTAs a SM)::

    python3 tools/tune_register.py --ns 12288,16384 --bs 64,128 --configs 512x8r1c8192w \
        --routed --stream-variants u8,t512,t512u8
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor

import torch
from gvr_kernels.register import RegisterConfig
from gvr_kernels.routing import Route, route_static
from gvr_kernels.testing import KernelProvider, check_windows

SHAPES = [(256, 2), (512, 1), (512, 2), (1024, 1), (512, 4), (1024, 2), (1024, 4), (512, 8),
          (1024, 8)]  # fmt: skip


def timed(fn, flush, reps):
    times = []
    for _ in range(reps):
        flush.zero_()
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1e3)
    return statistics.median(times)


def parse_configs(text):
    """``threads x vecs r resident c capacity [nb] [e] [w]`` items, comma-separated
    (``256x4r4c2048``; ``nb``: no bracket path, ``e``: early loads, ``w``: the bit walk, as
    the routed configurations name them: ``512x8r1c8192ew``) -> RegisterConfig keyword
    dicts."""
    out = []
    for item in filter(None, text.split(",")):
        m = re.fullmatch(r"(\d+)x(\d+)r(\d+)c(\d+)(nb)?(e)?(w)?", item)
        if m is None:
            raise SystemExit(f"--configs: cannot read {item!r} (want e.g. 256x4r4c2048)")
        t, v, r, c, nb, e, w = m.groups()
        out.append(dict(threads=int(t), vecs=int(v), resident=int(r), capacity=int(c),
                        bracket=nb is None, early_loads=e is not None,
                        bit_walk=w is not None))  # fmt: skip
    return out


def candidates(shapes, configs, n, dtype):
    """The register configurations timed on rows of ``n`` scores: those of ``--configs`` that
    hold the row (not four times over), else every shape of ``SHAPES`` at one and two CTAs per
    SM (512 threads or fewer)."""
    vec = 4 if dtype == "float32" else 8
    if configs:
        for kw in configs:
            if n <= vec * kw["threads"] * kw["vecs"] < 4 * n:
                yield RegisterConfig(dtype=dtype, **kw)
        return
    for threads, vecs in shapes:
        if vec * threads * vecs < n or vec * threads * vecs >= 4 * n:
            continue
        for resident in (1, 2) if threads <= 512 else (1,):
            yield RegisterConfig(threads=threads, vecs=vecs, resident=resident, dtype=dtype)


#: ``--stream-variants`` items: (512-thread core, vectors a thread a tile or None to keep).
STREAM_VARIANTS = {"u8": (False, 8), "t512": (True, None), "t512u8": (True, 8)}


def parse_stream_variants(text: str) -> list[str]:
    """``"u8,t512"`` -> ``["u8", "t512"]`` (items of :data:`STREAM_VARIANTS`)."""
    items = [x for x in text.split(",") if x]
    bad = [x for x in items if x not in STREAM_VARIANTS]
    if bad:
        raise SystemExit(f"--stream-variants: unknown {bad}; known: {sorted(STREAM_VARIANTS)}")
    return items


def stream_variants(
    spec, b: int, n: int, k: int, dtype: str, items, stream: Route | None = None
) -> list[tuple[str, Route]]:
    """``(name, route)`` of each ``--stream-variants`` item at a cell of ``b`` rows of ``n``
    scores: ``u8`` the cell's own streaming route (``stream``, routed here when not given)
    with eight vectors a thread a tile; ``t512`` the streaming family's 512-thread core of one
    CTA a row (its route past the SMs, left out where that is a split), launched on this
    cell's rows."""
    from dataclasses import replace

    def streaming(rows):
        return route_static(spec, rows=rows, n_env=n, k=k, dtype=dtype, families=("streaming",))

    core = None
    out = []
    for item in items:
        t512, unroll = STREAM_VARIANTS[item]
        if t512:
            core = core or streaming(max(b, 2 * spec.sm_count)).config
            if core.split:
                continue
            route = Route(config=core, parts=1, grid=b, workspace_words=0, n_env=n)
        else:
            stream = stream or streaming(b)
            route = stream
        if unroll is not None:
            route = replace(route, config=replace(route.config, unroll=unroll))
        out.append((f"streaming {item}", route))
    return out


def plan_cells(spec, args, shapes):
    """``(k, n, b, [(name, route)])`` per cell of the table: the streaming family's route, the
    routed one (``--routed``), then the register candidates."""
    for k in map(int, args.ks.split(",")):
        for n in map(int, args.ns.split(",")):
            if n <= k:
                continue
            for b in map(int, args.bs.split(",")):
                stream = route_static(
                    spec, rows=b, n_env=n, k=k, dtype=args.dtype, families=("streaming",)
                )
                cands = [("streaming", stream)]
                cands += stream_variants(spec, b, n, k, args.dtype, args.stream_variants, stream)
                if args.routed:
                    routed = route_static(spec, rows=b, n_env=n, k=k, dtype=args.dtype)
                    cands.append(("routed", routed))
                for cfg in candidates(shapes, args.configs, n, args.dtype):
                    r = Route(config=cfg, parts=1, grid=b, workspace_words=0, n_env=n)
                    cands.append((cfg.name, r))
                yield k, n, b, cands


def _build(cfg):
    from gvr_dispatch.cache import KernelCache

    try:
        KernelCache().get(cfg, "sm_90a")
        return None
    except Exception as exc:  # reported, and the cell times what built
        return f"{type(exc).__name__}: {str(exc)[:80]}"


def prebuild(cfgs):
    """Compile the configurations in parallel into the persistent kernel cache
    (``GVR_CACHE_DIR``) where the dispatch package is importable, and return those built; the
    timing loop loads them from there (``KernelProvider`` compiles any others)."""
    if importlib.util.find_spec("gvr_dispatch") is None or not os.environ.get("GVR_CACHE_DIR"):
        return []
    cfgs = list(dict.fromkeys(cfgs))
    built = []
    with ProcessPoolExecutor(min(len(cfgs), 16)) as ex:
        for cfg, err in zip(cfgs, ex.map(_build, cfgs), strict=True):
            if err:
                print(f"build {cfg.name}: {err}", flush=True)
            else:
                built.append(cfg)
    return built


def row_lengths(kind, b, n, k):
    """The ``b`` row lengths of a cell (``--lengths``), numpy int64, each at most ``n``."""
    import numpy as np

    if kind == "full":
        return np.full(b, n, np.int64)
    if kind == "short":
        rng = np.random.default_rng([b, n, k])
        return rng.integers(k + 1, max(k + 1, n // 8) + 1, b).astype(np.int64)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if root not in sys.path:  # (the repository root holds the benchmarks package)
        sys.path.insert(0, root)
    from benchmarks.bench_topk import ragged_lengths

    return ragged_lengths(b, n)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=None)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--ks", default="512,1024,2048")
    ap.add_argument("--ns", default="2048,4096,8192,16384,32768")
    ap.add_argument("--bs", default="1,8,32,128,512,2048")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    ap.add_argument("--configs", default="", help="e.g. 256x4r4c2048,512x2r2c8192 (else SHAPES)")
    ap.add_argument("--routed", action="store_true", help="also time the routed configuration")
    ap.add_argument("--lengths", default="full", choices=("full", "short", "ragged"))
    ap.add_argument(
        "--stream-variants", default="", help=f"of {','.join(STREAM_VARIANTS)} (one CTA a row)"
    )
    args = ap.parse_args()
    args.configs = parse_configs(args.configs)
    args.stream_variants = parse_stream_variants(args.stream_variants)
    dtype = getattr(torch, args.dtype)
    vec = 4 if args.dtype == "float32" else 8
    shapes = sorted({(t, v if vec == 4 else max(1, v // 2)) for t, v in SHAPES})
    kp = KernelProvider()
    cells = list(plan_cells(kp.spec, args, shapes))
    cfgs = prebuild([r.config for *_, cands in cells for _, r in cands])
    if cfgs:
        from gvr_dispatch.cache import KernelCache

        cache = KernelCache()
        kp.cache.update({c: cache.get(c, "sm_90a")[0].fn for c in cfgs})
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    g = torch.Generator(device="cuda").manual_seed(0)
    rows_out, bad = [], 0
    for k, n, b, cands in cells:
        x = torch.randn(b, n, generator=g, device="cuda").to(dtype)
        lens = torch.from_numpy(row_lengths(args.lengths, b, n, k)).cuda()
        kv = lens.to(torch.int32)
        zeros = torch.zeros(b, dtype=torch.int64, device="cuda")
        cell = {"k": k, "n": n, "b": b, "lengths": args.lengths}
        for name, route in cands:
            try:
                out, _, _, _ = kp.launch("decode", x, kv, None, k, route=route)
            except KeyError:  # not in the ahead-of-time export
                continue
            ok = bool(check_windows(x, zeros, lens, k, out).all())
            if not ok:
                bad += 1
                cell[name] = None
                continue
            fn = kp.get(route.config)
            res = [x, kv, kp.dummy_i, out, torch.zeros((1, 1), device="cuda", dtype=dtype),
                   kp.workspace, kp.dummy_i, k, 1, 0, route.parts, kp.dummy_f]  # fmt: skip
            cell[name] = timed(lambda: fn(*res), flush, args.reps)
        timed_ = {nm: v for nm, v in cell.items() if nm not in ("k", "n", "b", "lengths")}
        best = min((v, nm) for nm, v in timed_.items() if v)
        each = " ".join(
            f"{nm.replace('register_decode_', 'r_')}:{v:.1f}" if v else f"{nm}:BAD"
            for nm, v in timed_.items()
        )
        print(f"k={k} n={n} b={b} best={best[1]} {best[0]:.1f}us {each}", flush=True)
        rows_out.append(cell)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows_out, f, indent=1)
    print(f"inexact launches: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
