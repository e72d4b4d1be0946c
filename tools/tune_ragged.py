"""Raw kernel times of the ragged split (``StreamingConfig.ragged``) against the static launch
the router used before it, on the H200 (results: ``benchmarks/results/h200/tune_ragged.log``)::

    python3 tools/tune_ragged.py > tune_ragged.log

Per cell (arena width, rows, K) two batches of gaussian float32 rows: serving-like ragged
lengths (``benchmarks/bench_topk.ragged_lengths``: 80 % short, 15 % mid, 5 % long, the last
row the full width) and uniform full rows. ``static``: the same ``rows * parts`` CTAs with
``parts`` per row (``rows <= SMs / 2``), or one 1024-thread CTA per row (``SMs / 2 < rows <=
SMs``); ``ragged``: the routed ragged split. Each configuration is exported ahead of time (in
parallel), then launched directly (``gvr_kernels.abi.KernelArgs``); one CUDA-event median of
40 launches per cell, the L2 flushed before each, after a short bf16 matmul warm-up. Every
timed launch's answer is checked first (the selected values equal ``torch.topk``'s over each
row's window, as multisets).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

WIDTHS = (65536, 262144)
ROWS = (8, 32, 64, 100, 132)
KS = (512, 2048)
OUT = "/tmp/aot_tune_ragged"

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))


def routes(spec, rows, width, k):
    """``(static config, static parts, ragged config, ragged parts)`` of a decode launch, or
    None where the router does not pick the ragged split."""
    from gvr_kernels import routing

    r = routing.route_static(spec, rows=rows, n_env=width, k=k, families=("streaming",))
    if not getattr(r.config, "ragged", False):
        return None
    if rows <= spec.sm_count // 2:
        return replace(r.config, ragged=False), r.parts, r.config, r.parts
    single = replace(r.config, split=False, ragged=False, aim_mult=2)
    return single, 1, r.config, r.parts


def main() -> None:
    from gvr_kernels.spec import H200

    cells = [(w, b, k) for w in WIDTHS for b in ROWS for k in KS]
    cfgs = {c for w, b, k in cells for c in (routes(H200, b, w, k) or ())[::2]}
    import export_kernels as ek

    aot = ek.export_all(sorted(cfgs, key=str), OUT, jobs=15)
    import numpy as np
    import torch
    from bench_topk import ragged_lengths
    from device_streaming import decode_args, timeit, timing_setup
    from gvr_kernels.testing import KernelProvider

    kp = KernelProvider(aot)
    flush = timing_setup()

    def run(cfg, parts, lg, kv, k):
        f = kp.get(cfg)
        out = torch.empty((lg.shape[0], k), dtype=torch.int32, device="cuda")
        args = decode_args(kp, lg, kv, out, k, parts)
        f(*args)
        torch.cuda.synchronize()
        ok = True
        for r, n in enumerate(kv.tolist()):
            if n <= k:
                ok &= bool(torch.equal(out[r, :n].cpu(), torch.arange(n, dtype=torch.int32)))
                continue
            got = torch.sort(lg[r, :n][out[r].long()]).values
            want = torch.sort(torch.topk(lg[r, :n], k).values).values
            ok &= bool(torch.equal(got, want))
        return timeit(lambda: f(*args), flush, 40), ok

    print(f"# tools/tune_ragged.py on {torch.cuda.get_device_name()}: raw kernel times (us)")
    for w, b, k in cells:
        rt = routes(kp.spec, b, w, k)
        if rt is None:
            print(f"n={w} b={b} k={k} | not a ragged route", flush=True)
            continue
        s_cfg, s_parts, r_cfg, r_parts = rt
        lg = torch.randn(b, w, device="cuda")
        line = [f"n={w} b={b} k={k} | static {s_cfg.name} p{s_parts}, ragged p{r_parts}"]
        for name, lens in (("ragged", ragged_lengths(b, w)), ("uniform", np.full(b, w))):
            kv = torch.from_numpy(lens.astype(np.int32)).cuda()
            ts, oks = run(s_cfg, s_parts, lg, kv, k)
            tr, okr = run(r_cfg, r_parts, lg, kv, k)
            bad = "" if oks and okr else " INEXACT"
            line.append(f"{name}: static {ts:.1f} ragged {tr:.1f}{bad}")
        print(" | ".join(line), flush=True)


if __name__ == "__main__":
    main()
