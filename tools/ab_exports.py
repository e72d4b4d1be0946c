"""A/B of kernel builds: the routed launches of decode cells, each build's kernels from its own
ahead-of-time export, in one process, alternating, on the same tensors.

Export the cells' routed configurations from each source tree (on any machine; run it with
that tree's packages first on ``PYTHONPATH``), then time them on the device:

    CUTE_DSL_ARCH=sm_90a python tools/ab_exports.py --export old_dir
    CUTE_DSL_ARCH=sm_90a python tools/ab_exports.py --export new_dir   # (the other tree)
    python tools/ab_exports.py old=old_dir new=new_dir [more=dir ...]

Each cell ``b x n x K`` (``--cells``, default :data:`CELLS`) is routed with the H200's tables
(``gvr_kernels.spec.H200``), its rows of each value family (``--families``, default gaussian)
drawn once; every build's kernel is checked
exact (``device_streaming.timed_exact``: each row's selected values equal ``torch.topk``'s)
and timed, raw CUDA-event kernel time with a cold L2, ``--rounds`` alternations, the median
printed with each build's ratio to the first. The builds must hold the same configuration
names (the same routing), which the export of each tree gives.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

#: Default cells (rows, envelope, K): the workspace splits at one and eight rows, the cluster
#: splits, the ragged split and one CTA a row at 128-512 rows.
CELLS = (
    (1, 131072, 512), (1, 262144, 512), (1, 262144, 1024), (1, 262144, 2048),
    (8, 131072, 512), (8, 262144, 512), (4, 262144, 2048), (8, 262144, 2048),
    (8, 131072, 1024), (32, 65536, 2048), (32, 262144, 512), (32, 262144, 2048),
    (128, 65536, 512), (128, 262144, 1024), (300, 131072, 2048), (512, 65536, 2048),
    (512, 262144, 512),
)  # fmt: skip


def parse_cells(text: str | None) -> tuple[tuple[int, int, int], ...]:
    """``"b,n,k;b,n,k"`` as cells (:data:`CELLS` when empty)."""
    if not text:
        return CELLS
    cells = []
    for item in text.split(";"):
        b, n, k = (int(v) for v in item.split(","))
        if min(b, n, k) < 1 or k > 2048:
            raise ValueError(f"cell {item!r}: rows, width >= 1 and 1 <= K <= 2048")
        cells.append((b, n, k))
    return tuple(cells)


def parse_families(text: str) -> list[str]:
    """``"gaussian,dsa_like"`` as value-family names of ``gvr_kernels.testing.families``."""
    from gvr_kernels.testing import FAMILY_NAMES

    names = [name for name in text.split(",") if name]
    bad = [name for name in names if name not in FAMILY_NAMES]
    if bad or not names:
        raise ValueError(f"families {text!r}: expected names from {FAMILY_NAMES}")
    return names


def routes(cells):
    """``(b, n, k, route)`` of each cell, routed with the H200's tables."""
    from gvr_kernels.routing import route_static
    from gvr_kernels.spec import H200

    return [(b, n, k, route_static(H200, rows=b, n_env=n, k=k)) for b, n, k in cells]


def parse_builds(items: list[str]) -> list[tuple[str, str]]:
    """``name=dir`` items, at least two, names distinct."""
    builds = []
    for item in items:
        name, sep, folder = item.partition("=")
        if not sep or not name or not folder:
            raise ValueError(f"build {item!r}: expected name=dir")
        builds.append((name, folder))
    if len(builds) < 2 or len({n for n, _ in builds}) != len(builds):
        raise ValueError("give two or more builds with distinct names")
    return builds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("builds", nargs="*", help="name=export_dir, the first is the baseline")
    ap.add_argument("--export", help="export the cells' routed configurations here and stop")
    ap.add_argument("--cells", help="b,n,k;b,n,k (default: CELLS)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument(
        "--families", default="gaussian", help="value families of the rows (gvr_kernels.testing)"
    )
    args = ap.parse_args()
    cells = routes(parse_cells(args.cells))
    family_names = parse_families(args.families)
    if args.export:
        import export_kernels

        configs = sorted({r.config for *_, r in cells}, key=str)
        export_kernels.export_all(configs, args.export, merge=True)
        print(f"exported {len(configs)} kernels to {args.export}")
        return
    builds = parse_builds(args.builds)

    import numpy as np
    import torch
    from device_streaming import timed_exact, timing_setup
    from gvr_kernels.testing import KernelProvider, families

    kps = {name: KernelProvider(folder) for name, folder in builds}
    flush = timing_setup()
    g = torch.Generator(device="cuda").manual_seed(0)
    names = [name for name, _ in builds]
    print(
        f"# A/B on {torch.cuda.get_device_name()}: raw kernel us, medians of {args.rounds} rounds"
    )
    for (b, n, k, r), family in itertools.product(cells, family_names):
        logits = families(family, b, n, k, g)
        kv = torch.full((b,), n, dtype=torch.int32, device="cuda")
        times = {name: [] for name in names}
        exact = True
        for _ in range(args.rounds):
            for name in names:
                us, ok = timed_exact(kps[name], r.config, r.parts, logits, kv, k, flush)
                times[name].append(us)
                exact &= ok
        med = {name: float(np.median(v)) for name, v in times.items()}
        base = med[names[0]]
        cols = "  ".join(f"{name} {med[name]:.2f}" for name in names)
        ratios = "  ".join(f"{name}/{names[0]} {med[name] / base:.3f}" for name in names[1:])
        cell = f"b={b} n={n} k={k} {family} {r.config.name} p{r.parts}"
        print(f"{cell}: {cols}  {ratios} exact {exact}")


if __name__ == "__main__":
    main()
