"""Raw kernel times of the register-resident family with and without the bracket histogram
path (``RegisterConfig.bracket``), on the H200, for the routing rule in
``gvr_kernels.routing`` (results: ``benchmarks/results/h200/tune_bracket.log``)::

    python3 tools/tune_bracket.py > tune_bracket.log

Each configuration is exported ahead of time (in parallel, into ``/tmp/aot_tune_bracket``;
loading the exports needs the CuTe DSL runtime library on ``LD_LIBRARY_PATH``), then
launched directly (``gvr_kernels.abi.KernelArgs``) on gaussian float32 rows of full length;
one CUDA-event median of 60 launches per cell, the L2 flushed before each, after a short
bf16 matmul warm-up. Every kernel's answer on each cell is checked against ``torch.topk``
once before it is timed (a ``!`` marks an inexact one). Side-by-side comparisons with gvr_2
are ``benchmarks/bench_topk.py``'s (its Python entry point costs tens of microseconds per
eager call here, which a raw-kernel loop would charge to it).
"""

from __future__ import annotations

import sys
from pathlib import Path

#: Row length -> CTA shapes ``(threads, vecs, resident)`` holding it.
SHAPES = {
    4096: [(512, 2, 1), (1024, 1, 1)],
    8192: [(512, 4, 1), (512, 4, 2), (1024, 2, 1)],
    16384: [(1024, 4, 1), (512, 8, 1)],
}
BATCHES = (1, 32, 128, 512)
KS = (512, 1024, 2048)
OUT = "/tmp/aot_tune_bracket"


sys.path.insert(0, str(Path(__file__).parent))


def build(cfgs) -> str:
    import export_kernels as ek

    return ek.export_all(cfgs, OUT, jobs=12)


def configs(n: int):
    from gvr_kernels.register import RegisterConfig

    out = []
    for t, v, r in SHAPES[n]:
        for br in (True, False):
            if br and v > 4:  # the bracket path spills at eight vectors a thread
                continue
            out.append(RegisterConfig(threads=t, vecs=v, resident=r, bracket=br))
    return out


def main() -> None:
    cases = [(n, cfg) for n in SHAPES for cfg in configs(n)]
    # Compile before CUDA is initialised in this process (the pool forks).
    aot = build(list(dict.fromkeys(c for _, c in cases)))
    import torch
    from device_streaming import decode_args, timeit, timing_setup
    from gvr_kernels.testing import KernelProvider

    kp = KernelProvider(aot)
    flush = timing_setup()
    for n in SHAPES:
        for b in BATCHES:
            for k in KS:
                lg = torch.randn(b, n, device="cuda")
                kv = torch.full((b,), n, dtype=torch.int32, device="cuda")
                out = torch.empty((b, k), dtype=torch.int32, device="cuda")
                want = torch.sort(torch.topk(lg, k).values, dim=1).values
                row = []

                def exact():
                    got = torch.sort(torch.gather(lg, 1, out.long()), dim=1).values
                    return bool(torch.equal(got, want))

                for cfg in configs(n):
                    f = kp.get(cfg)
                    args = decode_args(kp, lg, kv, out, k, 1)
                    out.fill_(-7)
                    f(*args)
                    ok = exact()
                    t = timeit(lambda f=f, args=args: f(*args), flush, 60)
                    tag = cfg.name.removeprefix("register_decode_").replace("_a2_c8192", "")
                    row.append(f"{tag}:{t:.1f}{'' if ok else '!'}")
                print(f"n={n} b={b} k={k} " + " ".join(row), flush=True)


if __name__ == "__main__":
    main()
