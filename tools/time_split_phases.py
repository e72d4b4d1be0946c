"""Where a split streaming row spends its time, on the GPU::

    python3 tools/time_split_phases.py                       # b = 1, n = 131,072 / 262,144
    python3 tools/time_split_phases.py --ns 262144 --ks 512 --batches 1,8
    python3 tools/time_split_phases.py --ns 65536 --batches 64 --cluster 2   # a cluster split
    python3 tools/time_split_phases.py --rows-from real.safetensors --row 7 --ks 2048 --cluster 8
    python3 tools/time_split_phases.py --rows-from real.safetensors --row 7 --ks 2048 --split 8

Each cell is routed as the dispatcher routes a decode call (``gvr_kernels.routing.route_static``)
and must land on a split streaming configuration. That configuration is compiled twice: as
routed, and with ``stamp_phases`` (thread 0 of every CTA stamps ``%globaltimer`` at the
boundaries of ``gvr_kernels.streaming.config.STAMPS``; the stamps change no result). For each
of 30 launches, the L2 flushed before each, the tool takes the CTA that finished row 0 and
reads its phases, from the first CTA's entry (the launch's ``entry`` skew) to its finish. It
also takes the last arrival of the other CTAs (``others``; a cluster split, ``--cluster``, has no
arrival: its ``reserve`` / ``publish`` / ``cross`` / ``gather`` are the cluster meeting's own
boundaries, ``StreamingTopK._cluster_meet``). Medians, in microseconds, beside
the event time of the routed kernel (CUDA events, median of 40). The stamped answer is checked
against ``torch.topk`` (the selected values as multisets), on gaussian float32 rows, or on the
rows of ``--rows-from`` (a safetensors file of ``logits`` and ``lengths``, as the real rows;
``--row``: whose CTAs are read, default 0).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from gvr_kernels.streaming.config import STAMPS

sys.path.insert(0, str(Path(__file__).parent))

from phase_timing import WRAP  # noqa: E402


def phases(stamps: np.ndarray, grid: int, parts: int) -> dict[str, float] | None:
    """The phases (ns) of row 0's finishing CTA in one launch's stamps (``[grid, STAMP_WORDS]``
    of int64, zero where not stamped), or None when no CTA of row 0 stamped a finish."""
    fin = STAMPS.index("finish")
    row = stamps[:parts]
    done = [c for c in range(parts) if row[c, fin] != 0]
    if len(done) != 1:
        return None
    c = done[0]
    # The first entry, as a signed offset from this CTA's (the stamps wrap every 2**31 ns).
    ref = int(row[c, 0])
    t0 = ref + min(((int(e) - ref + WRAP // 2) % WRAP) - WRAP // 2 for e in row[:, 0])
    out = {"entry": float((int(row[c, 0]) - t0) % WRAP)}
    # Boundaries in the order this CTA stamped them (the finishing CTA stamps the linear
    # selection's ``hist`` and ``cross`` after its ``gather``).
    start = int(row[c, 0])
    marks = sorted(
        ((int(row[c, i]) - start) % WRAP, name)
        for i, name in enumerate(STAMPS[1:], start=1)
        if row[c, i] != 0
    )
    prev = start
    for offset, name in marks:
        out[name] = float((start + offset - prev) % WRAP)
        prev = start + offset
    arrive = STAMPS.index("arrive")
    others = [(int(row[o, arrive]) - t0) % WRAP for o in range(parts) if o != c and row[o, arrive]]
    if others:
        out["others"] = float(max(others))
    out["total"] = float((prev - t0) % WRAP)
    return out


def main() -> None:
    from phase_timing import cell_args, time_phases

    def skip(route):
        return None if getattr(route.config, "split", False) else "not a split row"

    def read(stamps, route, row):
        if route.config.ragged:
            # (a ragged split's argument is its extra CTAs; rows of one length get grid / rows
            # CTAs, handed out in-kernel: only row 0's are known to come first)
            if row:
                raise SystemExit("--row: a ragged split's CTAs are handed out in-kernel")
            return phases(stamps, route.grid, route.grid // (route.grid - route.parts))
        parts = route.parts
        return phases(stamps[row * parts : (row + 1) * parts], parts, parts)

    def extra(ap):
        ap.add_argument(
            "--cluster", type=int, default=0,
            help="time the cluster split of this many CTAs a row "
            "(gvr_kernels.routing.cluster_split_route) instead of the routed launch",
        )  # fmt: skip
        ap.add_argument(
            "--split", type=int, default=0,
            help="time the workspace split of this many CTAs a row (the cluster split's core "
            "without the cluster) instead of the routed launch",
        )  # fmt: skip

    args = cell_args("131072,262144", extra)
    route_of = None
    if args.cluster and args.split:
        raise SystemExit("--cluster and --split: one or the other")
    if args.cluster:
        from gvr_kernels.routing import cluster_split_route

        def route_of(spec, rows, n, k):
            return cluster_split_route(spec, rows=rows, n_env=n, k=k, cluster=args.cluster)

    elif args.split:
        from dataclasses import replace

        from gvr_kernels.routing import Route, cluster_split_route

        def route_of(spec, rows, n, k):
            # (the cluster split's core and preload for this many CTAs, meeting in the workspace)
            xs = cluster_split_route(spec, rows=rows, n_env=n, k=k, cluster=args.split)
            cfg = replace(xs.config, cluster=0)
            words = rows * cfg.workspace_words_per_row
            return Route(config=cfg, parts=args.split, grid=xs.grid, workspace_words=words, n_env=n)

    names = ("entry",) + STAMPS[1:] + ("others", "total")
    time_phases(args, skip, read, names, route_of=route_of)


if __name__ == "__main__":
    main()
