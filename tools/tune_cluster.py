"""Raw kernel times of the cluster-register family against the route the router picks
without it, on the H200, for the routing rule in ``gvr_kernels.routing`` (results:
``benchmarks/results/h200/tune_cluster.log``, ``tune_cluster_k2048.log``)::

    python3 tools/tune_cluster.py > tune_cluster.log
    python3 tools/tune_cluster.py --ns 16384 --batches 1,8,32   # some lengths and batches
    python3 tools/tune_cluster.py --ns 32768 --batches 8 --ks 2048 --families gaussian,dsa_like \
        --real-rows .device/data/real-rows --bracket-only
    python3 tools/tune_cluster.py --ns 65536 --batches 1,8 --shapes 8x512x4,8x1024x2 \
        --bracket-only --walk                               # other shapes, the bit walk

Each shape runs twice: with the bracket path (``b``) and with the sampled path only (``s``;
``--bracket-only`` skips it; ``--walk``: the bracket path with the bit walk,
``ClusterConfig.bit_walk``, as routed). ``--shapes`` replaces ``SHAPES`` for every length
(``CLUSTERxTHREADSxVECS,...``; a shape must hold the length). Rows are float32 of full
length from the named value families of ``gvr_reference.workloads`` (``--families``, default
gaussian); ``--real-rows`` adds every shared real-row file of a length in ``--ns``, its rows at
their own lengths, in one launch.

Each configuration is exported ahead of time (in parallel, into ``/tmp/aot_tune_cluster``),
then launched directly (``gvr_kernels.abi.KernelArgs``); one CUDA-event median of ``--reps``
launches per cell, the L2 flushed before each, after a short bf16 matmul warm-up. Every timed
launch's answer is checked first (each row's selected values equal ``torch.topk``'s over its
valid length, as multisets); an inexact cell is marked ``INEXACT``.
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
    32768: [(2, 1024, 4), (4, 512, 4), (8, 512, 2), (4, 1024, 2)],
    65536: [(4, 1024, 4), (8, 512, 4)],
    131072: [(8, 1024, 4), (16, 512, 4)],
    262144: [(16, 1024, 4)],
}
BRACKET = (True, False)
BATCHES = (1, 8, 16, 32)
KS = (512, 1024, 2048)
OUT = "/tmp/aot_tune_cluster"

sys.path.insert(0, str(Path(__file__).parent))


def parse_shapes(text: str) -> list[tuple[int, int, int]]:
    """``"8x512x4,8x1024x2"`` -> ``[(8, 512, 4), (8, 1024, 2)]`` (cluster, threads, vecs)."""
    return [tuple(int(x) for x in item.split("x")) for item in text.split(",")]


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
    ap.add_argument("--ks", default=",".join(map(str, KS)))
    ap.add_argument("--families", default="gaussian", help="value families of the rows")
    ap.add_argument("--real-rows", default=None, help="folder of the shared real-row files")
    ap.add_argument("--bracket-only", action="store_true", help="skip the sampled-only runs")
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--shapes", type=parse_shapes, default=None, help="e.g. 8x512x4,8x1024x2")
    ap.add_argument("--walk", action="store_true", help="the bracket path with the bit walk")
    args = ap.parse_args()
    ns = [int(x) for x in args.ns.split(",")]
    unknown = [n for n in ns if n not in SHAPES and not args.shapes]
    if unknown:
        raise SystemExit(f"--ns: no shapes for {unknown}; known: {sorted(SHAPES)}")
    shapes_of = {n: args.shapes or SHAPES[n] for n in ns}
    for n, shapes in shapes_of.items():
        small = [sh for sh in shapes if 4 * sh[0] * sh[1] * sh[2] < n]
        if small:
            raise SystemExit(f"--shapes: {small} hold fewer than {n} scores")
    batches = [int(x) for x in args.batches.split(",")]
    ks = [int(x) for x in args.ks.split(",")]
    families = args.families.split(",")
    brackets = (True,) if args.bracket_only else BRACKET

    from gvr_kernels.cluster import ClusterConfig
    from gvr_kernels.spec import H200

    real = _real_files(args.real_rows, ns)
    cells = [(n, b) for n in ns for b in batches] + [(n, b) for _, n, b in real]

    def shape_config(c, t, v, br):
        return ClusterConfig(cluster=c, threads=t, vecs=v, bracket=br, bit_walk=br and args.walk)

    cases = [
        (n, shape_config(c, t, v, br))
        for n, shapes in shapes_of.items()
        for c, t, v in shapes
        for br in brackets
    ]
    base_cfgs = {baseline_route(H200, b, n, k).config for n, b in cells for k in ks}
    # Compile before CUDA is initialised in this process (the pool forks).
    aot = build(list(dict.fromkeys([c for _, c in cases] + sorted(base_cfgs, key=str))))
    import torch
    from device_streaming import decode_args, timeit, timing_setup
    from gvr_kernels.spec import spec_from_properties
    from gvr_kernels.testing import KernelProvider
    from gvr_reference.workloads import make_logits

    spec = spec_from_properties(torch.cuda.get_device_properties(0))
    kp = KernelProvider(aot)
    flush = timing_setup()

    def exact(lg, kv, out, k):
        for r, n in enumerate(kv.tolist()):
            m = min(k, n)
            got = torch.sort(lg[r][out[r, :m].long()]).values
            if not torch.equal(got, torch.sort(torch.topk(lg[r, :n], m).values).values):
                return False
        return True

    def run(cfg, parts, lg, kv, k):
        f = kp.get(cfg)
        out = torch.empty((lg.shape[0], k), dtype=torch.int32, device="cuda")
        args_ = decode_args(kp, lg, kv, out, k, parts)
        f(*args_)
        torch.cuda.synchronize()
        return timeit(lambda: f(*args_), flush, args.reps), exact(lg, kv, out, k)

    def row_sets():
        for n, b in ((n, b) for n in ns for b in batches):
            for fam in families:
                lg = torch.from_numpy(make_logits(n + b, fam, b, n, max(ks))).cuda()
                kv = torch.full((b,), n, dtype=torch.int32, device="cuda")
                yield f"n={n} b={b} {fam}", n, lg, kv
        for name, n, _ in real:
            lg, kv = _load_real(name)
            yield f"n={n} b={lg.shape[0]} {name.stem}", n, lg, kv

    for label, n, lg, kv in row_sets():
        b = lg.shape[0]
        for k in ks:
            base = baseline_route(spec, b, n, k)
            tb, okb = run(base.config, base.parts, lg, kv, k)
            mark = "" if okb else " INEXACT"
            cells_ = [f"base {base.config.name} p{base.parts}: {tb:.1f}{mark}"]
            for c, th, v in shapes_of[n]:
                if b * c > spec.sm_count:
                    continue
                for br in brackets:
                    cfg = shape_config(c, th, v, br)
                    tc, okc = run(cfg, 1, lg, kv, k)
                    tag = f"x{c}t{th}v{v}{'b' if br else 's'}{'w' if cfg.bit_walk else ''}"
                    cells_.append(f"{tag}: {tc:.1f}{'' if okc else ' INEXACT'}")
            print(f"{label} k={k} | " + " | ".join(cells_), flush=True)


def _real_files(folder, ns):
    """``(path, width, rows)`` of the shared real-row files whose width is in ``ns``."""
    if not folder:
        return []
    from safetensors import safe_open

    found = []
    for path in sorted(Path(folder).glob("*.safetensors")):
        with safe_open(str(path), framework="np") as fh:  # reads the header only
            rows, width = fh.get_slice("logits").get_shape()
        if width in ns:
            found.append((path, width, rows))
    return found


def _load_real(path):
    """A real-row file's logits and lengths on the GPU."""
    import torch
    from safetensors.torch import load_file

    d = load_file(str(path))
    return d["logits"].cuda().contiguous(), d["lengths"].cuda().to(torch.int32)


if __name__ == "__main__":
    main()
