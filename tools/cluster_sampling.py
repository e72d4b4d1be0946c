"""How the cluster-register family's rung behaves on skewed rows (CPU, no GPU): the
cluster-wide sample it uses (every CTA's slots exchanged, one rung for the row,
``gvr_reference.cluster_model``) against the alternative that needs no sample exchange, a
rung per CTA from its own slots only, combined by the maximum (the gather then holds every
key at or above the highest rung, enough only when that leaves ``k``) or by the minimum (every
key at or above the lowest rung, which every CTA would need to know: an exchange anyway, and
more survivors on a skewed row). Per row family and shape: the share of rows the staging
serves (no whole-row rescue) and the survivor counts the leader selects over.
The numbers quoted in ``docs/kernels.md`` (cluster-register family)::

    python tools/cluster_sampling.py [--real-rows ../shared/data/real-rows]
"""

from __future__ import annotations

import argparse
import glob

import numpy as np
from gvr_reference.cluster_model import ClusterParams, sample_positions, simulate_row
from gvr_reference.keys import order_key
from gvr_reference.model import Path, rung_with_ties
from gvr_reference.register_model import register_plan

SHAPES = {"x8 t512 v4": ClusterParams(8, 512, 4), "x4 t1024 v4": ClusterParams(4, 1024, 4)}
N = 65536
ROWS = 64


def _rows(family: str, g: np.random.Generator) -> np.ndarray:
    x = g.standard_normal((ROWS, N)).astype(np.float32)
    if family == "position_skew":  # a ramp: the top-K at the row's end
        x += np.linspace(0, 20, N, dtype=np.float32)[None, :]
    elif family == "hot_chunk":  # one eighth of the row (one 512 x 4 CTA) holds the top
        x[:, : N // 8] += 4.0
    elif family == "sink_recent":  # an attention sink and a recent window
        x[:, :64] += 6.0
        x[:, -2048:] += 3.0
    return x


def local_rungs(keys: np.ndarray, k: int, p: ClusterParams) -> list[int]:
    """Each CTA's rung from its own sample slots, aimed at its share of ``aim`` keys (the
    plan of :func:`register_plan` for ``ceil(k / cluster)`` over the CTA's chunk)."""
    pos = sample_positions(keys.size, 0, p)
    chunk = 4 * p.cta_vecs
    k_r = -(-k // p.cluster)
    out = []
    for r in range(p.cluster):
        mine = pos[(pos // chunk) == r]
        n_r = max(0, min(chunk, keys.size - r * chunk))
        if n_r <= k_r or mine.size == 0:
            out.append(1)
            continue
        plan = register_plan(n_r, k_r, int(mine.size), p.aim_mult)
        out.append(1 if plan.unsampled else rung_with_ties(keys[mine], plan.j1, lo=1)[0])
    return out


def row_stats(x: np.ndarray, k: int, p: ClusterParams):
    keys = order_key(np.ascontiguousarray(x, np.float32)).astype(np.int64)
    t = simulate_row(x, k, p)
    served = t.path in (Path.FIRST, Path.UNSAMPLED, Path.TIE)
    rungs = local_rungs(keys, k, p)
    c_max = int(np.count_nonzero(keys >= max(rungs)))
    c_min = int(np.count_nonzero(keys >= min(rungs)))
    return served, t.count1, (k <= c_max <= p.capacity, c_max), (c_min <= p.capacity, c_min)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--real-rows", default=None)
    args = ap.parse_args()
    g = np.random.default_rng(2026)
    sets = {f: _rows(f, g) for f in ("gaussian", "position_skew", "hot_chunk", "sink_recent")}
    if args.real_rows:
        from gvr_reference.realdata import load_shared_rows

        for f in sorted(glob.glob(f"{args.real_rows}/*.safetensors")):
            x, lens, _ = load_shared_rows(f)
            if x.shape[1] <= N:
                sets[f.split("/")[-1].removesuffix(".safetensors")] = x[:, : int(lens.min())]
    print(f"n = {N} (real rows: their own width), {ROWS} synthetic rows per family")
    print(
        "served: share of rows the staging serves (no whole-row rescue); count: median / "
        "max survivors the leader selects over"
    )
    for name, p in SHAPES.items():
        for k in (512, 2048):
            print(f"\n{name}, K = {k} (capacity {p.capacity})")
            print(
                f"{'rows':>34} | {'cluster sample':>22} | {'max of CTA rungs':>22} | "
                f"{'min of CTA rungs':>22}"
            )
            for fam, xs in sets.items():
                st = [row_stats(x, k, p) for x in xs]
                cols = []
                for served, counts in (
                    ([s[0] for s in st], [s[1] for s in st]),
                    ([s[2][0] for s in st], [s[2][1] for s in st]),
                    ([s[3][0] for s in st], [s[3][1] for s in st]),
                ):
                    cols.append(
                        f"{np.mean(served):5.0%} {int(np.median(counts)):7d} "
                        f"{int(np.max(counts)):7d}"
                    )
                print(f"{fam:>34} | " + " | ".join(cols))


if __name__ == "__main__":
    main()
