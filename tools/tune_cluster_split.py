"""Raw kernel times of the cluster split (``StreamingConfig.cluster``: a row's CTAs in one
thread-block cluster, meeting through DSMEM) against the routed launch and the workspace split
of the same CTAs, on the H200 (results: ``benchmarks/results/h200/tune_cluster_split.log``)::

    python3 tools/tune_cluster_split.py > tune_cluster_split.log

Per cell (row length, rows, K) two batches of gaussian float32 rows: uniform full rows, and
serving-like ragged lengths (``benchmarks/bench_topk.ragged_lengths``, the last row the full
width). ``routed``: the configuration and grid the router chooses today
(``gvr_kernels.routing.route_static``); ``split pC``: the workspace split of the same core with
``C`` CTAs a row; ``xC``: the cluster split of ``C`` CTAs a row
(``gvr_kernels.routing.cluster_split_route``), for every cluster size with ``rows * C`` at
most the SMs and at most what the device schedules. Each configuration is exported ahead of
time (in parallel), then launched directly (``gvr_kernels.abi.KernelArgs``); one CUDA-event
median of 40 launches per cell, the L2 flushed before each, after a short bf16 matmul warm-up.
Every timed launch's answer is checked first (the selected values equal ``torch.topk``'s over
each row's window, as multisets): ``INEXACT`` marks a cell that is not. Each line ends with the
fastest cluster split and its time over the routed launch's.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

WIDTHS = (32768, 65536, 131072, 262144)
ROWS = (1, 4, 8, 16, 32, 64)
KS = (512, 1024, 2048)
CLUSTERS = (2, 4, 8, 16)
OUT = "/tmp/aot_tune_cluster_split"

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))


def variants(spec, rows, width, k):
    """``[(label, config, parts)]`` of a decode cell: the routed launch, then for each cluster
    size that fits (``rows * C <= SMs``, ``C <= spec.max_cluster_size``) the workspace split and
    the cluster split of ``C`` CTAs a row."""
    from gvr_kernels import routing

    r = routing.route_static(spec, rows=rows, n_env=width, k=k)
    out = [("routed", r.config, r.parts)]
    for c in CLUSTERS:
        if rows * c > spec.sm_count or c > spec.max_cluster_size:
            continue
        cs = routing.cluster_split_route(spec, rows=rows, n_env=width, k=k, cluster=c).config
        out.append((f"split p{c}", replace(cs, cluster=0), c))
        out.append((f"x{c}", cs, c))
    return out


def main() -> None:
    from gvr_kernels.spec import H200

    cells = [(w, b, k) for w in WIDTHS for b in ROWS for k in KS]
    cfgs = {cfg for w, b, k in cells for _, cfg, _ in variants(H200, b, w, k)}
    import export_kernels as ek

    aot = ek.export_all(sorted(cfgs, key=str), OUT, jobs=15)
    import numpy as np
    import torch
    from bench_topk import ragged_lengths
    from device_streaming import timed_exact, timing_setup
    from gvr_kernels.testing import KernelProvider

    kp = KernelProvider(aot)
    flush = timing_setup()

    def run(cfg, parts, lg, kv, k):
        return timed_exact(kp, cfg, parts, lg, kv, k, flush)

    print(f"# tools/tune_cluster_split.py on {torch.cuda.get_device_name()}: raw kernel times (us)")
    for w, b, k in cells:
        lg = torch.randn(b, w, device="cuda")
        vs = variants(kp.spec, b, w, k)
        for name, lens in (("uniform", np.full(b, w)), ("ragged", ragged_lengths(b, w))):
            if name == "ragged" and b < 4:
                continue
            kv = torch.from_numpy(lens.astype(np.int32)).cuda()
            line = [f"n={w} b={b} k={k} {name:7s} | routed {vs[0][1].name} p{vs[0][2]}"]
            times = {}
            for label, cfg, parts in vs:
                try:
                    t, ok = run(cfg, parts, lg, kv, k)
                except RuntimeError as e:  # (a cluster the device cannot schedule here)
                    line.append(f"{label} failed: {str(e).splitlines()[0][:60]}")
                    continue
                times[label] = t
                line.append(f"{label} {t:.1f}{'' if ok else ' INEXACT'}")
            # the fastest cluster split against the routed launch
            ran = [(t, lb) for lb, t in times.items() if lb.startswith("x")]
            if ran and "routed" in times:
                best = min(ran)
                line.append(f"best {best[1]} {best[0] / times['routed']:.2f}x routed")
            print(" | ".join(line), flush=True)


if __name__ == "__main__":
    main()
