"""Raw kernel times of the cluster-register family against the route the router picks
without it, on the H200, for the routing rule in ``gvr_kernels.routing`` (results:
``benchmarks/results/h200/tune_cluster.log``)::

    python3 tools/tune_cluster.py > tune_cluster.log
    python3 tools/tune_cluster.py --ns 16384 --batches 1,8,32   # some lengths and batches

Each shape runs twice: with the bracket path (``b``) and with the sampled path only (``s``).

Each configuration is exported ahead of time (in parallel, into ``/tmp/aot_tune_cluster``),
then launched directly (``gvr_kernels.abi.KernelArgs``) on gaussian float32 rows of full
length; one CUDA-event median of 40 launches per cell, the L2 flushed before each, after a
short bf16 matmul warm-up. Every timed launch's answer is checked first (the selected
values equal ``torch.topk``'s as multisets).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

#: (cluster, threads, vecs) shapes tried per row length, each with the bracket path and
#: with the sampled path only.
SHAPES = {
    # n = 16,384: the register family's single 1024 x 4 CTA issues every instruction of the
    # row from one SM; spread over 2-4 SMs
    16384: [(2, 512, 4), (4, 512, 2), (2, 1024, 2), (4, 1024, 1)],
    32768: [(2, 1024, 4), (4, 512, 4)],
    65536: [(4, 1024, 4), (8, 512, 4)],
    131072: [(8, 1024, 4), (16, 512, 4)],
    262144: [(16, 1024, 4)],
}
BRACKET = (True, False)
BATCHES = (1, 8, 16, 32)
KS = (512, 1024, 2048)
OUT = "/tmp/aot_tune_cluster"

sys.path.insert(0, str(Path(__file__).parent))


def build(cfgs) -> str:
    import export_kernels as ek

    return ek.export_all(cfgs, OUT, jobs=15)


def baseline_route(spec, rows, n, k):
    """The route without the cluster family (what the router chose before it)."""
    from gvr_kernels import routing

    return routing.route_static(spec, rows=rows, n_env=n, k=k, families=("streaming", "register"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--ns", default=",".join(map(str, SHAPES)), help="row lengths, of SHAPES")
    ap.add_argument("--batches", default=",".join(map(str, BATCHES)))
    args = ap.parse_args()
    ns = [int(x) for x in args.ns.split(",")]
    unknown = [n for n in ns if n not in SHAPES]
    if unknown:
        raise SystemExit(f"--ns: no shapes for {unknown}; known: {sorted(SHAPES)}")
    shapes_of = {n: SHAPES[n] for n in ns}
    batches = [int(x) for x in args.batches.split(",")]

    from gvr_kernels.cluster import ClusterConfig
    from gvr_kernels.spec import H200

    cases = [
        (n, ClusterConfig(cluster=c, threads=t, vecs=v, bracket=br))
        for n, shapes in shapes_of.items()
        for c, t, v in shapes
        for br in BRACKET
    ]
    base_cfgs = {baseline_route(H200, b, n, k).config for n in ns for b in batches for k in KS}
    # Compile before CUDA is initialised in this process (the pool forks).
    aot = build(list(dict.fromkeys([c for _, c in cases] + sorted(base_cfgs, key=str))))
    import torch
    from device_streaming import decode_args, timeit, timing_setup
    from gvr_kernels.spec import spec_from_properties
    from gvr_kernels.testing import KernelProvider

    spec = spec_from_properties(torch.cuda.get_device_properties(0))
    kp = KernelProvider(aot)
    flush = timing_setup()

    def run(cfg, parts, lg, kv, k):
        f = kp.get(cfg)
        out = torch.empty((lg.shape[0], k), dtype=torch.int32, device="cuda")
        args = decode_args(kp, lg, kv, out, k, parts)
        f(*args)
        torch.cuda.synchronize()
        got = torch.sort(torch.gather(lg, 1, out.long()), dim=1).values
        want = torch.sort(torch.topk(lg, k, dim=1).values, dim=1).values
        ok = bool(torch.equal(got, want))
        return timeit(lambda: f(*args), flush, 40), ok

    for n, shapes in shapes_of.items():
        for b in batches:
            for k in KS:
                lg = torch.randn(b, n, device="cuda")
                kv = torch.full((b,), n, dtype=torch.int32, device="cuda")
                base = baseline_route(spec, b, n, k)
                tb, okb = run(base.config, base.parts, lg, kv, k)
                mark = "" if okb else " INEXACT"
                cells = [f"base {base.config.name} p{base.parts}: {tb:.1f}{mark}"]
                for c, th, v in shapes:
                    if b * c > spec.sm_count:
                        continue
                    for br in BRACKET:
                        cfg = ClusterConfig(cluster=c, threads=th, vecs=v, bracket=br)
                        tc, okc = run(cfg, 1, lg, kv, k)
                        tag = f"x{c}t{th}v{v}{'b' if br else 's'}"
                        cells.append(f"{tag}: {tc:.1f}{'' if okc else ' INEXACT'}")
                print(f"n={n} b={b} k={k} | " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
