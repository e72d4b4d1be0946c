"""The cluster split against the workspace split, as routed today, after the workspace
split's meeting got faster (results: ``benchmarks/results/h100/tune_meet.log``)::

    CUTE_DSL_ARCH=sm_90a python3 tools/tune_meet.py --export DIR   # any machine
    python3 tools/tune_meet.py --aot DIR [--rounds 3]             # the GPU

Per cell (rows, envelope, K, uniform full rows or the serving-like ragged lengths of
``benchmarks/bench_topk.ragged_lengths``): ``routed``, the configuration
``gvr_kernels.routing.route_static`` chooses for the H200's tables, and ``wsplit``, the
workspace split the router gives the same launch without any cluster (the streaming family
alone, ``routing._split_cluster`` answering 0). Both are exported ahead of time, then
launched directly (``gvr_kernels.abi.KernelArgs``) on the same gaussian float32 rows,
alternating, ``--rounds`` times: each time one CUDA-event median of 40 launches with the L2
flushed before each (``device_streaming.timed_exact``, which checks every launch's answer
against ``torch.topk`` first: ``INEXACT`` marks a cell that is not). Prints the median of the
rounds and ``wsplit / routed``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

#: (rows, envelope, K, lengths): the cluster split's rows (3-12 rows, the cluster core's eight
#: 1024-thread CTAs a row at 131,072) and the cluster pair's (32 and 64 rows).
CELLS = [(b, n, k, "uniform") for b in (4, 8, 12) for n in (131072, 262144) for k in (1024, 2048)]
CELLS += [(8, 262144, k, "ragged") for k in (512, 2048)]
CELLS += [(32, n, k, "uniform") for n in (65536, 131072) for k in (512, 1024, 2048)]
CELLS += [(64, 65536, k, kind) for k in (512, 2048) for kind in ("uniform", "ragged")]


def variants(rows: int, n: int, k: int):
    """``[(label, config, parts)]``: the routed launch, then the workspace split (when it
    differs)."""
    from gvr_kernels import routing
    from gvr_kernels.spec import H200

    routed = routing.route_static(H200, rows=rows, n_env=n, k=k)
    keep = routing._split_cluster
    routing._split_cluster = lambda *a, **kw: 0
    try:
        ws = routing.route_static(H200, rows=rows, n_env=n, k=k, families=("streaming",))
    finally:
        routing._split_cluster = keep
    out = [("routed", routed.config, routed.parts)]
    if ws.config != routed.config:
        out.append(("wsplit", ws.config, ws.parts))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--export", help="export the cells' configurations into this folder")
    ap.add_argument("--aot", help="time the cells with the kernels exported here")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if args.export:
        import export_kernels

        cfgs = {c for b, n, k, _ in CELLS for _, c, _ in variants(b, n, k)}
        export_kernels.export_all(sorted(cfgs, key=str), args.export, jobs=2)
        return
    import numpy as np
    import torch
    from bench_topk import ragged_lengths
    from device_streaming import timed_exact, timing_setup
    from gvr_kernels.testing import KernelProvider

    kp = KernelProvider(args.aot)
    flush = timing_setup()
    print(
        f"# tools/tune_meet.py on {torch.cuda.get_device_name()}: raw kernel us, medians of "
        f"{args.rounds} rounds (each a median of 40 cold-L2 launches)",
        flush=True,
    )
    for b, n, k, kind in CELLS:
        g = torch.Generator(device="cuda").manual_seed(b * 7 + n + k)
        logits = torch.randn(b, n, device="cuda", generator=g)
        lens = np.full(b, n) if kind == "uniform" else ragged_lengths(b, n)
        kv = torch.from_numpy(lens.astype(np.int32)).cuda()
        vs = variants(b, n, k)
        times = {label: [] for label, _, _ in vs}
        exact = dict.fromkeys(times, True)
        for _ in range(args.rounds):
            for label, cfg, parts in vs:
                us, ok = timed_exact(kp, cfg, parts, logits, kv, k, flush)
                times[label].append(us)
                exact[label] &= ok
        med = {label: statistics.median(t) for label, t in times.items()}
        line = f"b={b} n={n} k={k} {kind:7s} | " + " | ".join(
            f"{label} {cfg.name} p{parts}: {med[label]:.2f}{'' if exact[label] else ' INEXACT'}"
            for label, cfg, parts in vs
        )
        if "wsplit" in med:
            line += f" | wsplit/routed {med['wsplit'] / med['routed']:.3f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
