"""Raw kernel times of the routed launch beside its variants not yet routed, on the GPU::

    python3 tools/tune_variants.py > tune_variants.log
    python3 tools/tune_variants.py --real-rows ../shared/data/real-rows > tune_variants.log

The kernels can be exported beforehand on any machine (``CUTE_DSL_ARCH=sm_90a python3
tools/tune_variants.py --real-rows <folder> --export-only --aot <folder>``), then the run
given ``--aot <folder>`` exports only what is missing.

Per cell the H200's routed configuration and grid (``gvr_kernels.routing.route_static`` with
``gvr_kernels.spec.H200``, on whatever GPU runs the tool), then:

- streaming and register routes: the same launch with dense rows, ``dense_min`` 2, 3 and 4
  (``d2``, ...; rows of more than ``dense_min * K`` scores that the aim would leave unsampled
  are sampled, the rung aiming at ``11 K / 8`` survivors, ``gvr_reference.ladder.dense_aim``;
  ``d0``, the plain launch, in place of a route's own ``dense_min``);
- register and cluster routes with the bracket path: the same launch with the bit walk
  (``walk``: ``RegisterConfig.bit_walk`` / ``ClusterConfig.bit_walk``), or without it
  (``nowalk``) where the route walks;
- streaming routes: the streaming pass with more bytes in flight: a bulk L2 prefetch one or
  two tiles ahead (``pf1``, ``pf2``: ``StreamingConfig.prefetch``), eight vectors a thread per
  tile (``u8``: ``StreamingConfig.unroll``), and both (``u8pf1``);
- workspace-split routes, and register routes of K > 1024: the cluster split
  (``routing.cluster_split_route``) of 2, 4, 8 and 16 CTAs a row with ``dense_min`` 0 and 2
  (``x2``, ``x2d2``, ...; sizes whose CTAs would pass the SMs, or that the device does not
  schedule, are left out). Over 32,768 scores it beat the register row on gaussian rows but
  lost on the real rows (``routing._cluster_split_replaces``), whose short rows ran
  unsampled; upstream GVR V2 meets on a cluster of two at b = 64 over 65,536 scores, where
  GVR's workspace split of two lost most on the ragged set.

Four kinds of batches of float32 rows: gaussian rows whose lengths all lie in one band
(``band n=L``: every row of ``L`` scores in an arena of ``width``), full rows of the decode
grid's register and cluster cells and of its K = 2048 split cells (``band n=width``),
serving-like ragged lengths
(``benchmarks/bench_topk.ragged_lengths``, the last row the full width), and, with
``--real-rows``, every file of the real rows at its own rows and width. Each configuration is
exported ahead of time (in parallel), then launched directly (``gvr_kernels.abi.KernelArgs``);
one CUDA-event median of 40 launches per cell, the L2 flushed before each, after a short bf16
matmul warm-up. Every timed launch's answer is checked first (the selected values equal
``torch.topk``'s over each row's window, as multisets): ``INEXACT`` marks a cell that is not.
Each line ends with the fastest variant over the routed time.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

DENSE = (2, 3, 4)
#: The cluster split's alternatives to a register or workspace-split route of K > 1024:
#: cluster sizes and ``dense_min``.
CLUSTER_SPLIT_SIZES = (2, 4, 8, 16)
CLUSTER_SPLIT_DENSE = (0, 2)
#: (width, rows, K, band length or None for ragged lengths)
BANDS = [
    (w, b, k, n)
    for w, b in ((32768, 1), (32768, 8), (65536, 64))
    for k, ns in ((2048, (4097, 6144, 8193, 12288)), (1024, (2049, 3072, 4097, 6144)))
    for n in ns
]
#: full rows of the decode grid: the register and cluster cells (the bit walk), K = 2048 where
#: the workspace split serves b <= 32, and the bandwidth-bound single-CTA rows at b >= 128
FULL = (
    [(w, b, k, w) for w in (4096, 16384, 65536) for b in (1, 8, 32, 128, 512) for k in (512, 2048)]
    + [(w, b, 2048, w) for w in (131072, 262144) for b in (1, 8, 32)]
    + [(262144, b, k, 262144) for b in (128, 512) for k in (512, 2048)]
)
RAGGED = [(w, b, k, None) for w in (65536, 262144) for b in (8, 64, 256) for k in (512, 1024, 2048)]
#: The streaming pass's variants: (label, prefetch tiles, vectors a thread per tile).
PASS = (("pf1", 1, None), ("pf2", 2, None), ("u8", 0, 8), ("u8pf1", 1, 8))
OUT = "/tmp/aot_tune_variants"

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))


#: The variant groups (``--variants``).
GROUPS = ("dense", "walk", "pass", "split")


def variants(spec, rows, width, k, groups=GROUPS):
    """``[(label, config, parts)]`` of a decode cell: the routed launch, its dense variants
    (streaming and register routes: ``dense_min`` 2, 3 and 4, or 0, 3 and 4 for a route
    with dense rows), its bit walk or, routed with it, its predicated form (``nowalk``:
    bracket routes of the register and cluster families), the streaming pass's
    (:data:`PASS`), then (routed to the workspace split, or K > 1024 routed to the register
    family) the cluster split's; only those of ``groups`` (:data:`GROUPS`: ``dense``,
    ``walk``, ``pass``, ``split``); ``[]`` for a cell with no variant."""
    from gvr_kernels import routing

    r = routing.route_static(spec, rows=rows, n_env=width, k=k)
    cfg = r.config
    out = [("routed", cfg, r.parts)]
    if cfg.family in ("streaming", "register") and "dense" in groups:
        # (a route with dense rows times the plain launch, d0, in place of its own)
        dense = [0 if d == cfg.dense_min else d for d in DENSE]
        out += [(f"d{d}", replace(cfg, dense_min=d), r.parts) for d in dense]
    if cfg.family == "streaming" and "pass" in groups:
        for label, depth, unroll in PASS:
            v = replace(cfg, prefetch=depth, unroll=unroll or cfg.unroll)
            if v != cfg and not v.block_skip:
                out.append((label, v, r.parts))
    if cfg.family in ("register", "cluster") and cfg.bracket and "walk" in groups:
        label = "nowalk" if cfg.bit_walk else "walk"
        out.append((label, replace(cfg, bit_walk=not cfg.bit_walk), r.parts))
    workspace_split = cfg.family == "streaming" and cfg.split and not cfg.cluster
    split = workspace_split or (k > 1024 and cfg.family == "register")
    if split and "split" in groups:
        for c in CLUSTER_SPLIT_SIZES:
            if rows * c > spec.sm_count or c > spec.max_cluster_size:
                continue
            cs = routing.cluster_split_route(spec, rows=rows, n_env=width, k=k, cluster=c)
            for d in CLUSTER_SPLIT_DENSE:
                label = f"x{c}" + (f"d{d}" if d else "")
                out.append((label, replace(cs.config, dense_min=d), cs.parts))
    return out if len(out) > 1 else []


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--real-rows", type=Path, default=None, help="folder of real-row files")
    ap.add_argument(
        "--aot", default=OUT, help="folder of the exported kernels (made here unless complete)"
    )
    ap.add_argument("--jobs", type=int, default=15, help="export processes")
    ap.add_argument(
        "--export-only",
        action="store_true",
        help="export the kernels into --aot and stop (on any machine, CUTE_DSL_ARCH=sm_90a)",
    )
    ap.add_argument(
        "--kinds",
        default="band,full,ragged,real",
        help="the kinds of batches to run (comma-separated: band, full, ragged, real)",
    )
    ap.add_argument(
        "--variants",
        default=",".join(GROUPS),
        help=f"the variant groups to time (comma-separated, of {', '.join(GROUPS)})",
    )
    args = ap.parse_args()
    groups = tuple(args.variants.split(","))
    import numpy as np
    import torch
    from gvr_kernels.spec import H200

    real = []
    if args.real_rows is not None:
        from safetensors.torch import load_file

        for f in sorted(args.real_rows.glob("*.safetensors")):
            d = load_file(f)
            for k in (512, 1024, 2048):
                real.append((f.stem, d["logits"], d["lengths"], k))
    cells = BANDS + FULL + RAGGED + [(lg.shape[1], lg.shape[0], k, name) for name, lg, _, k in real]
    kinds = set(args.kinds.split(","))
    cells = [c for c in cells if batch_kind(c[3], c[0]) in kinds]
    cfgs = {cfg for w, b, k, _ in cells for _, cfg, _ in variants(H200, b, w, k, groups)}
    import export_kernels as ek

    # (exported before CUDA starts: the export's pool forks)
    done = exported_names(args.aot)
    missing = [c for c in sorted(cfgs, key=str) if c.name not in done]
    if missing:
        ek.export_all(missing, args.aot, jobs=args.jobs, merge=True)
    if args.export_only:
        print(f"{len(cfgs)} kernels in {args.aot} ({len(missing)} exported now)")
        return
    aot = args.aot
    from bench_topk import ragged_lengths
    from device_streaming import timed_exact, timing_setup
    from gvr_kernels.testing import KernelProvider

    kp = KernelProvider(aot)
    flush = timing_setup()
    print(f"# tools/tune_variants.py on {torch.cuda.get_device_name()}: raw kernel times (us)")
    g = torch.Generator(device="cuda").manual_seed(0)
    files = {name: (lg, lens) for name, lg, lens, _ in real}
    ratios = {}  # (kind of batch, variant) -> [variant time / routed time]
    for w, b, k, kind in cells:
        vs = variants(H200, b, w, k, groups)
        if not vs:
            print(f"n={w} b={b} k={k} {kind or 'ragged'} | no variant", flush=True)
            continue
        if isinstance(kind, str):
            lg, lens = files[kind]
            lg, kv, label = lg.cuda(), lens.to(torch.int32).cuda(), kind
        else:
            lg = torch.randn(b, w, generator=g, device="cuda")
            lens = np.full(b, kind) if kind else ragged_lengths(b, w)
            kv = torch.from_numpy(lens.astype(np.int32)).cuda()
            label = f"band n={kind}" if kind else "ragged"
        line = [f"n={w} b={b} k={k} {label} | routed {vs[0][1].name} p{vs[0][2]}"]
        times = {}
        for name, cfg, parts in vs:
            t, ok = timed_exact(kp, cfg, parts, lg, kv, k, flush)
            times[name] = t
            line.append(f"{name} {t:.1f}{'' if ok else ' INEXACT'}")
        best = min((t, name) for name, t in times.items() if name != "routed")
        line.append(f"best {best[1]} {best[0] / times['routed']:.2f}x routed")
        print(" | ".join(line), flush=True)
        group = batch_kind(kind, w)
        for name, t in times.items():
            ratios.setdefault((group, name), []).append(t / times["routed"])
    print(summary(ratios))


def exported_names(folder: str) -> set:
    """The configuration names in the export manifest of ``folder`` (empty without one)."""
    import json

    from gvr_kernels.aot import MANIFEST

    path = Path(folder, MANIFEST)
    return set(json.loads(path.read_text())) if path.exists() else set()


def batch_kind(kind, width: int) -> str:
    """The summary group of a cell: ``band`` (rows of one length below the width), ``full``,
    ``ragged`` or ``real``."""
    if isinstance(kind, str):
        return "real"
    if kind is None:
        return "ragged"
    return "full" if kind == width else "band"


def summary(ratios: dict) -> str:
    """Per kind of batch and variant: the geometric mean of the variant's time over the
    routed launch's, and its range, over the cells it ran on."""
    import math

    lines = ["# summary: variant time / routed time (geomean, range, cells)"]
    for (group, name), rs in sorted(ratios.items()):
        if name == "routed":
            continue
        gm = math.exp(sum(math.log(r) for r in rs) / len(rs))
        lines.append(f"{group:6s} {name:6s} {gm:.3f}x ({min(rs):.2f}-{max(rs):.2f}, {len(rs)})")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
