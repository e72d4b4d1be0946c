"""Plots of a ``bench_topk.py`` result (matplotlib, PNG): GVR's speedup over torch.topk and
GVR's time over upstream GVR V2's (gvr_2) per decode-grid cell, and time against n."""

from __future__ import annotations

import math
import sys
from pathlib import Path

GRID_K = (512, 1024, 2048)


def _grid(records, timing):
    return [r for r in records if r["set"] in ("decode-grid", "graph") and r["timing"] == timing]


def _heatmaps(records, timing, path, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    recs = [r for r in _grid(records, timing) if r["provider"] == "gvr" and r["speedup_vs_torch"]]
    if not recs:
        return False
    ns = sorted({r["n"] for r in recs})
    bs = sorted({r["rows"] for r in recs})
    fig, axes = plt.subplots(1, len(GRID_K), figsize=(5 * len(GRID_K), 4), squeeze=False)
    for ax, k in zip(axes[0], GRID_K, strict=False):
        m = np.full((len(bs), len(ns)), np.nan)
        for r in recs:
            if r["k"] == k:
                m[bs.index(r["rows"]), ns.index(r["n"])] = r["speedup_vs_torch"]
        im = ax.imshow(m, cmap="viridis", origin="lower", aspect="auto")
        for i in range(len(bs)):
            for j in range(len(ns)):
                if not np.isnan(m[i, j]):
                    ax.text(j, i, f"{m[i, j]:.1f}x", ha="center", va="center", color="w")
        ax.set_xticks(range(len(ns)), [str(n) for n in ns], rotation=30)
        ax.set_yticks(range(len(bs)), [str(b) for b in bs])
        ax.set_xlabel("n (scores per row)")
        ax.set_ylabel("batch (rows)")
        ax.set_title(f"K = {k}")
        fig.colorbar(im, ax=ax, shrink=0.8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _ratio_heatmaps(records, timing, path, title):
    """GVR time / gvr_2 time per (batch, n), one panel per K, on a diverging colormap centred
    on 1.0 (blue: GVR faster, red: gvr_2 faster), symmetric in log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.colors import TwoSlopeNorm

    recs = [r for r in _grid(records, timing) if r["provider"] == "gvr" and r.get("ratio_vs_gvr2")]
    if not recs:
        return False
    ns = sorted({r["n"] for r in recs})
    bs = sorted({r["rows"] for r in recs})
    ratios = [r["ratio_vs_gvr2"] for r in recs]
    span = max(max(ratios), 1.0 / min(ratios), 1.05)
    norm = TwoSlopeNorm(vmin=1.0 / span, vcenter=1.0, vmax=span)
    fig, axes = plt.subplots(1, len(GRID_K), figsize=(5 * len(GRID_K), 4), squeeze=False)
    for ax, k in zip(axes[0], GRID_K, strict=False):
        m = np.full((len(bs), len(ns)), np.nan)
        for r in recs:
            if r["k"] == k:
                m[bs.index(r["rows"]), ns.index(r["n"])] = r["ratio_vs_gvr2"]
        im = ax.imshow(m, cmap="RdBu_r", norm=norm, origin="lower", aspect="auto")
        for i in range(len(bs)):
            for j in range(len(ns)):
                if not np.isnan(m[i, j]):
                    dark = abs(math.log(m[i, j])) > 0.6 * math.log(span)
                    color = "w" if dark else "k"
                    ax.text(j, i, f"{m[i, j]:.2f}", ha="center", va="center", color=color)
        ax.set_xticks(range(len(ns)), [str(n) for n in ns], rotation=30)
        ax.set_yticks(range(len(bs)), [str(b) for b in bs])
        ax.set_xlabel("n (scores per row)")
        ax.set_ylabel("batch (rows)")
        ax.set_title(f"K = {k}")
        fig.colorbar(im, ax=ax, shrink=0.8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _times(records, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recs = [r for r in _grid(records, "eager") if r["median_us"]]
    if not recs:
        return False
    bs = sorted({r["rows"] for r in recs})
    styles = [("gvr", "-"), ("gvr2", ":"), ("torch", "--")]
    styles = [(p, st) for p, st in styles if any(r["provider"] == p for r in recs)]
    fig, axes = plt.subplots(1, len(GRID_K), figsize=(5 * len(GRID_K), 4), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, k in zip(axes[0], GRID_K, strict=False):
        for ci, b in enumerate(bs):
            for prov, style in styles:
                pts = sorted(
                    (r["n"], r["median_us"])
                    for r in recs
                    if r["k"] == k and r["rows"] == b and r["provider"] == prov
                )
                if pts:
                    ax.plot(
                        *zip(*pts, strict=True),
                        style,
                        marker="o",
                        ms=3,
                        color=colors[ci % len(colors)],
                        label=f"{prov} b={b}",
                    )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("n (scores per row)")
        ax.set_ylabel("time (us, cold L2)")
        ax.set_title(f"K = {k}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][-1].legend(fontsize=7, ncol=len(styles))
    names = {"gvr": "GVR (solid)", "gvr2": "gvr_2 (dotted)", "torch": "torch.topk (dashed)"}
    fig.suptitle("time vs n: " + ", ".join(names[p] for p, _ in styles))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def make_plots(result: dict, out: Path, tag: str) -> list[str]:
    """Write the PNGs for ``result``; returns their file names (none, with a message on
    stderr, where matplotlib is not installed)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("plots skipped: matplotlib is not installed", file=sys.stderr)
        return []
    made = []
    recs = result["records"]
    if _heatmaps(
        recs,
        "eager",
        out / f"{tag}_speedup.png",
        "GVR speedup over torch.topk, decode grid, eager, cold L2",
    ):
        made.append(f"{tag}_speedup.png")
    if _heatmaps(
        recs,
        "graph",
        out / f"{tag}_graph_speedup.png",
        "GVR speedup over torch.topk, decode grid, CUDA-graph replay",
    ):
        made.append(f"{tag}_graph_speedup.png")
    for timing, name, how in (
        ("eager", f"{tag}_vs_gvr2.png", "eager, cold L2"),
        ("graph", f"{tag}_graph_vs_gvr2.png", "CUDA-graph replay"),
    ):
        if _ratio_heatmaps(
            recs,
            timing,
            out / name,
            f"GVR time / gvr_2 time, decode grid, {how} (< 1: GVR faster)",
        ):
            made.append(name)
    if _times(recs, out / f"{tag}_time.png"):
        made.append(f"{tag}_time.png")
    return made
