"""Raw kernel times of the register-resident family with and without the bracket histogram
path (``RegisterConfig.bracket``), on the H200, for the routing rule in
``gvr_kernels.routing`` (results: ``benchmarks/results/h200/tune_bracket.log``)::

    python3 tools/tune_bracket.py > tune_bracket.log

Each configuration is exported ahead of time (in parallel, into ``/tmp/aot_tune_bracket``),
then launched directly (``gvr_kernels.abi.KernelArgs``) on gaussian float32 rows of full
length; one CUDA-event median of 60 launches per cell, the L2 flushed before each, after a
short bf16 matmul warm-up. The answers are not checked here (the device suites do that).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

SHAPES = {4096: [(512, 2, 1)], 8192: [(512, 4, 1), (512, 4, 2)], 16384: [(1024, 4, 1)]}
BATCHES = (1, 32, 128, 512)
KS = (512, 1024, 2048)
OUT = "/tmp/aot_tune_bracket"


sys.path.insert(0, str(Path(__file__).parent))


def build(cfgs) -> str:
    import export_kernels as ek

    return ek.export_all(cfgs, OUT, jobs=12)


def main() -> None:
    from gvr_kernels.register import RegisterConfig

    cases = [
        (n, RegisterConfig(threads=t, vecs=v, resident=r, bracket=br))
        for n, shapes in SHAPES.items()
        for t, v, r in shapes
        for br in (True, False)
    ]
    # Compile before CUDA is initialised in this process (the pool forks).
    aot = build(list(dict.fromkeys(c for _, c in cases)))
    import torch
    from device_streaming import timeit
    from gvr_kernels.abi import KernelArgs
    from gvr_kernels.testing import KernelProvider

    kp = KernelProvider(aot)
    flush = torch.empty(2 * 60 * 2**20 // 4, dtype=torch.float32, device="cuda")

    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t = time.time()
    while time.time() - t < 2:
        x @ x
    for n, cfg in cases:
        f = kp.get(cfg)
        row = []
        for b in BATCHES:
            for k in KS:
                lg = torch.randn(b, n, device="cuda")
                kv = torch.full((b,), n, dtype=torch.int32, device="cuda")
                out = torch.empty((b, k), dtype=torch.int32, device="cuda")
                args = KernelArgs(
                    logits=lg, lens_a=kv, lens_b=kp.dummy_i, out=out,
                    values=torch.empty(1, 1, device="cuda"), workspace=kp.workspace,
                    paths=kp.dummy_i, k=k, next_n=1, cr_shift=0, parts=1,
                )  # fmt: skip
                f(*args)
                t = timeit(lambda f=f, args=args: f(*args), flush, 60)
                row.append(f"b{b}k{k}:{t:.1f}")
        print(n, cfg.name, " ".join(row), flush=True)


if __name__ == "__main__":
    main()
