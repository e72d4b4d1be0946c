"""Routed launches of the streaming splits against their alternatives, after the workspace
split's meeting got faster, and other routing questions (results:
``benchmarks/results/h100/tune_meet.log``, ``tune_alt.log``, ``tune_aim.log``,
``tune_parts.log``, ``tune_many.log``, ``tune_rows2.log``; ``h200/tune_fill.log``)::

    CUTE_DSL_ARCH=sm_90a python3 tools/tune_meet.py --set meet --export DIR   # any machine
    python3 tools/tune_meet.py --set meet --aot DIR [--rounds 3]             # the GPU

Sets (``--set``):

- ``meet``: the cluster split (or the cluster core it replaces) against ``wsplit``, the
  workspace split the router gives the same launch without any cluster (the streaming family
  alone, ``routing._split_cluster`` answering 0);
- ``alt``: the routed launch against ``wsplit``, ``rsplit`` (the ragged split, its envelope
  gate ``RAGGED_MIN_N`` lowered to the cell's) and ``bulk`` (the 512-thread core's ragged
  split of many rows, ``RAGGED_BULK_MIN_N`` lowered likewise), where they differ from it;
- ``aim``: the routed launch against the same configuration aiming its first rung at two,
  three and four K survivors (``StreamingConfig.aim_mult``; the routed aim not repeated);
- ``parts``: few long rows, the routed launch against ``wsplit`` and the workspace split with
  parts of at least 4,096 and 2,048 scores (``MIN_PART_ELEMS`` lowered: ``p4096``,
  ``p2048``), i.e. more CTAs a row, as many as the SMs share out;
- ``many``: launches of 64-512 rows, the routed launch against the pair of 512-thread
  cluster CTAs a row (``x2``, the cluster the router gives 32 rows of 16,384) and against the
  routed streaming configuration with one to four tiles of bulk L2 prefetch (``pf1``-``pf4``,
  ``StreamingConfig.prefetch``);
- ``fill``: launches whose cluster route would pass half the SMs, the routed launch against
  the cluster the router gives when clusters may fill every SM (``all``:
  ``CLUSTER_SM_SHARE`` and ``SMALL_CLUSTER_SM_SHARE`` 1);
- ``rows2``: 133-264 rows of one 512-thread streaming CTA each, the routed launch against one
  tile of bulk L2 prefetch (``pf1``), the 512-thread ragged split of ``rows + SMs`` CTAs
  (``bulk``, ``RAGGED_BULK_MIN_N`` lowered to the cell's envelope) and both (``bulk_pf1``);
- ``bracket``: register rows whose K passes a quarter of the envelope, at every batch, on
  both paths: where the router keeps the sampled path and radix levels over the registers,
  against the same launch on the bracket histogram path (``br``: ``RegisterConfig.bracket``
  with the bit walk); where it takes the bracket (four vectors a thread,
  ``routing.BRACKET_WIDE_K_VECS``), against the radix path (``radix``).

Per cell (rows, envelope, K, uniform full rows or the serving-like ragged lengths of
``benchmarks/bench_topk.ragged_lengths``) every variant is routed with the H200's tables,
exported ahead of time, then launched directly (``gvr_kernels.abi.KernelArgs``) on the same
gaussian float32 rows, alternating, ``--rounds`` times: each time one CUDA-event median of 40
launches with the L2 flushed before each (``device_streaming.timed_exact``, which checks every
launch's answer against ``torch.topk`` first: ``INEXACT`` marks a cell that is not). Prints
the median of the rounds and each variant's ratio to the routed launch.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

#: (rows, envelope, K, lengths) of each set.
CELLS = {
    # the cluster split's rows (3-12 rows, the cluster core's eight 1024-thread CTAs a row at
    # 131,072) and the cluster pair's (32 and 64 rows)
    "meet": [
        (b, n, k, "uniform") for b in (4, 8, 12) for n in (131072, 262144) for k in (1024, 2048)
    ]
    + [(8, 262144, k, "ragged") for k in (512, 2048)]
    + [(32, n, k, "uniform") for n in (65536, 131072) for k in (512, 1024, 2048)]
    + [(64, 65536, k, kind) for k in (512, 2048) for kind in ("uniform", "ragged")],
    # 65,536-score arenas of 8-512 rows, one or eight rows of the cluster family
    "alt": [
        (b, 65536, k, kind)
        for b in (32, 64, 256, 512)
        for k in (512, 2048)
        for kind in ("uniform", "ragged")
    ]
    + [(1, 131072, k, "uniform") for k in (512, 1024, 2048)]
    + [(8, 65536, k, "uniform") for k in (512, 1024, 2048)]
    + [(8, 65536, k, "ragged") for k in (512, 2048)]
    + [(1, 65536, k, "uniform") for k in (512, 1024)],
    # the workspace, ragged and single-CTA streaming routes
    "aim": [(1, 262144, k, "uniform") for k in (512, 1024, 2048)]
    + [(8, 131072, k, "uniform") for k in (512, 2048)]
    + [(8, 262144, 512, "uniform"), (8, 262144, 512, "ragged")]
    + [(32, 262144, k, kind) for k in (512, 2048) for kind in ("uniform", "ragged")]
    + [(128, 65536, k, "uniform") for k in (512, 2048)],
    # one to eight rows of 65,536-262,144 scores
    "parts": [(1, n, k, "uniform") for n in (65536, 131072, 262144) for k in (512, 1024, 2048)]
    + [(2, 262144, k, "uniform") for k in (512, 2048)]
    + [(8, 65536, k, "uniform") for k in (512, 1024)],
    # more rows than the cluster's half of the SMs, and long rows on one CTA among many
    "many": [(b, 16384, k, "uniform") for b in (64, 128) for k in (512, 1024, 2048)]
    + [(256, 65536, k, "ragged") for k in (512, 2048)]
    + [(b, 65536, 512, "uniform") for b in (128, 512)],
    # small clusters of 64-132 CTAs, the cluster family's of 96-128
    "fill": [(32, 16384, k, "uniform") for k in (512, 1024, 2048)]
    + [(24, 16384, 512, "uniform"), (32, 12288, 512, "uniform")]
    + [(64, 16384, k, "uniform") for k in (512, 2048)]
    + [(b, 8192, 2048, "uniform") for b in (32, 64)]
    + [(16, 65536, k, "uniform") for k in (512, 2048)]
    + [(12, 65536, 512, "uniform")]
    + [(32, 32768, k, "uniform") for k in (512, 2048)]
    + [(6, 131072, k, "uniform") for k in (512, 2048)],
    # rows between one and two per SM on one 512-thread streaming CTA each
    "rows2": [
        (b, n, 512, kind)
        for b in (160, 256)
        for n in (32768, 65536, 131072)
        for kind in ("uniform", "ragged")
    ]
    + [(256, 65536, 2048, kind) for kind in ("uniform", "ragged")],
    # K above a quarter of a register row's envelope
    "bracket": [(b, 4096, 2048, "uniform") for b in (1, 8, 32, 64, 128, 256, 512)]
    + [(b, 6144, 2048, "uniform") for b in (1, 32, 128, 512)]
    + [(b, 2048, 1024, "uniform") for b in (1, 128)]
    + [(b, 4096, 2048, "ragged") for b in (8, 64)],
}


@contextlib.contextmanager
def _patched(**values):
    """``gvr_kernels.routing``'s names set to ``values`` for the block."""
    from gvr_kernels import routing

    keep = {name: getattr(routing, name) for name in values}
    for name, value in values.items():
        setattr(routing, name, value)
    try:
        yield
    finally:
        for name, value in keep.items():
            setattr(routing, name, value)


def variants(which: str, rows: int, n: int, k: int):
    """``[(label, config, parts)]`` of a cell in set ``which``: the routed launch first, then
    each alternative that differs from every one before it."""
    from gvr_kernels import routing
    from gvr_kernels.spec import H200

    out, seen = [], set()

    def add(label, route):
        if (route.config, route.parts) not in seen:
            seen.add((route.config, route.parts))
            out.append((label, route.config, route.parts))

    routed = routing.route_static(H200, rows=rows, n_env=n, k=k)
    add("routed", routed)
    streaming = dict(rows=rows, n_env=n, k=k, families=("streaming",))
    no_cluster = dict(_split_cluster=lambda *a, **kw: 0)
    if which in ("meet", "alt"):
        with _patched(**no_cluster):
            add("wsplit", routing.route_static(H200, **streaming))
    if which == "alt":
        with _patched(RAGGED_MIN_N=n, **no_cluster):
            add("rsplit", routing.route_static(H200, **streaming))
        with _patched(RAGGED_BULK_MIN_N=n):
            add("bulk", routing.route_static(H200, **streaming))
    if which == "parts":
        with _patched(**no_cluster):
            add("wsplit", routing.route_static(H200, **streaming))
        for part in (4096, 2048):
            with _patched(MIN_PART_ELEMS=part, **no_cluster):
                add(f"p{part}", routing.route_static(H200, **streaming))
    if which == "many":
        if n <= routing.REGISTER_MAX_N:
            add("x2", routing.route_static(H200, rows=32, n_env=n, k=k))
        elif routed.config.family == "streaming" and not routed.config.block_skip:
            for pf in (1, 2, 4):
                add(f"pf{pf}", replace(routed, config=replace(routed.config, prefetch=pf)))
    if which == "fill":
        with _patched(CLUSTER_SM_SHARE=1, SMALL_CLUSTER_SM_SHARE=1):
            add("all", routing.route_static(H200, rows=rows, n_env=n, k=k))
    if which == "rows2":
        add("pf1", replace(routed, config=replace(routed.config, prefetch=1)))
        with _patched(RAGGED_BULK_MIN_N=n):
            bulk = routing.route_static(H200, **streaming)
        add("bulk", bulk)
        add("bulk_pf1", replace(bulk, config=replace(bulk.config, prefetch=1)))
    if which == "bracket" and routed.config.family == "register":
        # the other path of the same launch: the bracket where the router keeps the radix
        # selection, else the radix selection (routing.BRACKET_WIDE_K_VECS)
        if routed.config.bracket:
            add(
                "radix",
                replace(routed, config=replace(routed.config, bracket=False, bit_walk=False)),
            )
        else:
            add("br", replace(routed, config=replace(routed.config, bracket=True, bit_walk=True)))
    if which == "aim":
        for aim in (2, 3, 4):
            cfg = replace(routed.config, aim_mult=aim)
            add(f"a{aim}", replace(routed, config=cfg))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--set", default="meet", choices=sorted(CELLS))
    ap.add_argument("--export", help="export the cells' configurations into this folder")
    ap.add_argument("--aot", help="time the cells with the kernels exported here")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    cells = CELLS[args.set]
    if args.export:
        import export_kernels

        cfgs = {c for b, n, k, _ in cells for _, c, _ in variants(args.set, b, n, k)}
        export_kernels.export_all(sorted(cfgs, key=str), args.export, jobs=2)
        return
    import numpy as np
    import torch
    from bench_topk import ragged_lengths
    from device_streaming import timed_exact, timing_setup
    from gvr_kernels.testing import KernelProvider

    kp = KernelProvider(args.aot)
    flush = timing_setup()
    print(
        f"# tools/tune_meet.py --set {args.set} on {torch.cuda.get_device_name()}: raw kernel "
        f"us, medians of {args.rounds} rounds (each a median of 40 cold-L2 launches)",
        flush=True,
    )
    for b, n, k, kind in cells:
        g = torch.Generator(device="cuda").manual_seed(b * 7 + n + k)
        logits = torch.randn(b, n, device="cuda", generator=g)
        lens = np.full(b, n) if kind == "uniform" else ragged_lengths(b, n)
        kv = torch.from_numpy(lens.astype(np.int32)).cuda()
        vs = variants(args.set, b, n, k)
        times = {label: [] for label, _, _ in vs}
        exact = dict.fromkeys(times, True)
        for _ in range(args.rounds):
            for label, cfg, parts in vs:
                us, ok = timed_exact(kp, cfg, parts, logits, kv, k, flush)
                times[label].append(us)
                exact[label] &= ok
        med = {label: statistics.median(t) for label, t in times.items()}
        parts_text = []
        for label, cfg, parts in vs:
            text = f"{label} {cfg.name} p{parts}: {med[label]:.2f}"
            text += "" if exact[label] else " INEXACT"
            if label != "routed":
                text += f" ({med[label] / med['routed']:.3f})"
            parts_text.append(text)
        print(f"b={b} n={n} k={k} {kind:7s} | " + " | ".join(parts_text), flush=True)


if __name__ == "__main__":
    main()
