"""Which rows of a ragged decode batch finish last, and where their time goes, on the GPU::

    CUTE_DSL_ARCH=sm_90a python3 tools/time_ragged_rows.py --export-only --aot <folder>
    python3 tools/time_ragged_rows.py --aot <folder>

Per cell (serving-like ragged lengths, ``benchmarks/bench_topk.ragged_lengths``, gaussian
float32 rows), the H200's route of a decode call (``gvr_kernels.routing.route_static`` with
``gvr_kernels.spec.H200``, on whatever GPU runs the tool) compiled with ``stamp_phases``
(thread 0 of every CTA stamps ``%globaltimer`` at its family's phase boundaries: the
streaming family's ``STAMPS`` or the register family's; the stamps change no result). The
cluster-register family has no stamps and is skipped.

For each of ``--reps`` launches, the L2 flushed before each: ``t0`` is the launch's earliest
stamp; a row *ends* at the last stamp of its CTAs. The rows are ranked by their median end
(over the launches), and the ``--top`` slowest are printed with their length, their end and
the phases of their last-ending CTA (medians, microseconds; a phase is the time from the
boundary before it to its own, so a path that skips a boundary folds its time into the next),
beside the routed kernel's CUDA-event time (median of 40, no stamps). The stamped answer is
checked against ``torch.topk`` first (the selected values as multisets).

A ragged split (routed, or forced with ``--ragged``: the split ``tools/tune_ragged.py``
times against the static launch) is read through its CPU model
(``gvr_reference.ragged.ragged_blocks``: which CTA serves which row); its ``window`` phase
holds the in-kernel hand-out.

    python3 tools/time_ragged_rows.py --cells 65536:256:512 --ragged

``--lengths equal`` reads the same cells with every row as long as the width (the ragged
split's cost on rows of equal length, against the routed one-CTA-a-row launch).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))

from phase_timing import WRAP, selection_exact, stamp_spans  # noqa: E402

#: (width, rows, K) of the cells read by default: ragged-set cells whose routes map their CTAs
#: to rows statically (b = 256 in the 65,536 arena now routes to the ragged split: read it with
#: ``--cells 65536:256:512``).
CELLS = [(w, b, k) for w, b in ((65536, 64), (262144, 8)) for k in (512, 2048)]


def cell_lengths(kind: str, b: int, w: int):
    """The ``b`` row lengths of a cell of width ``w`` (int64): ``"ragged"`` serving-like
    (``benchmarks/bench_topk.ragged_lengths``), ``"equal"`` every row ``w``."""
    import numpy as np

    if kind == "equal":
        return np.full(b, w, np.int64)
    if kind != "ragged":
        raise ValueError(f"lengths must be 'ragged' or 'equal', got {kind!r}")
    from bench_topk import ragged_lengths

    return np.asarray(ragged_lengths(b, w), np.int64)


def stamped_route(spec, w: int, b: int, k: int, ragged: bool = False):
    """``(route, stamped configuration)`` of a cell, or ``(route, None)`` where the tool
    cannot read it (the cluster-register family: no stamps). ``ragged``: the ragged split of
    the cell's CTAs in place of the routed launch, where ``tools/tune_ragged.py`` has one
    (else ``(route, None)``)."""
    from gvr_kernels.routing import Route, route_static

    route = route_static(spec, rows=b, n_env=w, k=k)
    if ragged:
        from tune_ragged import routes

        alt = routes(spec, b, w, k)
        if alt is None:
            return route, None
        _, cfg, extra = alt[2][0]  # the first ragged split it times
        route = Route(config=cfg, parts=extra, grid=b + extra, n_env=w,
                      workspace_words=min(b, extra) * cfg.workspace_words_per_row)  # fmt: skip
    cfg = route.config
    if not hasattr(cfg, "stamp_phases"):
        return route, None
    return route, replace(cfg, stamp_phases=True)


def cta_rows(route, lengths) -> np.ndarray:
    """The row each CTA of ``route`` serves (int64 ``[grid]``, ``-1``: none): ``parts``
    consecutive CTAs a row, or a ragged split's hand-out by its CPU model."""
    from gvr_reference.ragged import MIN_PART, ragged_blocks

    if getattr(route.config, "ragged", False):
        return ragged_blocks(lengths, route.grid, MIN_PART)[:, 0]
    return np.repeat(np.arange(len(lengths)), route.grid // len(lengths))


def row_ends(stamps: np.ndarray, rows_of: np.ndarray, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """One launch's stamps (int64 ``[grid, words]``, zero where not stamped) and the row of
    each CTA (``rows_of``, ``-1`` for none): per row, its end (ns after the launch's
    earliest stamp) and the index of its last-ending CTA."""
    hit = stamps != 0
    # (the stamps wrap: each relative to one of them, in [-WRAP / 2, WRAP / 2), then to the
    # earliest)
    ref = stamps[hit][0]
    rel = (stamps - ref + WRAP // 2) % WRAP - WRAP // 2
    rel = np.where(hit, rel - rel[hit].min(), -1)
    last = rel.max(axis=1)
    ends = np.full(rows, -1, np.int64)
    which = np.zeros(rows, np.int64)
    for r in range(rows):
        ctas = np.flatnonzero(rows_of == r)
        if ctas.size:
            at = ctas[last[ctas].argmax()]
            ends[r], which[r] = last[at], at
    return ends, which


def parse_cells(text: str) -> list[tuple[int, int, int]]:
    """``"65536:256:512,262144:8:2048"`` -> ``[(width, rows, K), ...]``."""
    return [tuple(int(x) for x in item.split(":")) for item in text.split(",")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--aot", default="/tmp/aot_ragged_rows", help="folder of exported kernels")
    ap.add_argument("--export-only", action="store_true", help="export the kernels and stop")
    ap.add_argument("--jobs", type=int, default=8, help="export processes")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--top", type=int, default=6, help="slowest rows printed a cell")
    ap.add_argument(
        "--cells", type=parse_cells, default=CELLS, help="width:rows:K,... (default: CELLS)"
    )
    ap.add_argument("--ragged", action="store_true", help="the ragged split of each cell")
    ap.add_argument("--lengths", default="ragged", choices=("ragged", "equal"))
    args = ap.parse_args()
    from gvr_kernels.spec import H200

    routes = {cell: stamped_route(H200, *cell, args.ragged) for cell in args.cells}
    cfgs = [c for route, stamped in routes.values() if stamped for c in (route.config, stamped)]
    import export_kernels as ek

    ek.export_all(sorted(set(cfgs), key=str), args.aot, jobs=args.jobs, merge=True)
    if args.export_only:
        print(f"exported {len(set(cfgs))} kernels to {args.aot}")
        return
    import torch
    from device_streaming import decode_args, timed_exact, timing_setup
    from gvr_kernels.family import STAMP_WORDS
    from gvr_kernels.register.config import STAMPS as REGISTER_STAMPS
    from gvr_kernels.streaming.config import STAMPS as STREAMING_STAMPS
    from gvr_kernels.testing import KernelProvider

    kp = KernelProvider(args.aot)
    flush = timing_setup()
    g = torch.Generator(device="cuda").manual_seed(0)
    print(f"# tools/time_ragged_rows.py on {torch.cuda.get_device_name()}: us")
    # (the provider's workspace covers every route: a forced ragged split meets in at most
    # the SMs' slots, as a routed one does)
    for (w, b, k), (route, stamped) in routes.items():
        if stamped is None:
            print(f"n={w} b={b} k={k}: {route.config.name} not read (no stamps)")
            continue
        names = STREAMING_STAMPS if stamped.family == "streaming" else REGISTER_STAMPS
        lens = cell_lengths(args.lengths, b, w)
        lg = torch.randn(b, w, generator=g, device="cuda")
        kv = torch.from_numpy(lens.astype(np.int32)).cuda()
        t_ev, exact = timed_exact(kp, route.config, route.parts, lg, kv, k, flush)
        rows_of = cta_rows(route, lens)
        stamps = torch.zeros(route.grid * STAMP_WORDS, dtype=torch.int32, device="cuda")
        out = torch.empty((b, k), dtype=torch.int32, device="cuda")
        launch = decode_args(kp, lg, kv, out, k, route.parts)._replace(paths=stamps)
        f = kp.get(stamped)
        ends, phases = [], []
        for _ in range(args.reps):
            flush.zero_()
            stamps.zero_()
            f(*launch)
            torch.cuda.synchronize()
            st = stamps.view(route.grid, STAMP_WORDS).cpu().numpy().astype(np.int64)
            end, last = row_ends(st[:, : len(names)], rows_of, b)
            ends.append(end)
            phases.append([stamp_spans(st[c, : len(names)], names) for c in last])
        exact &= selection_exact(lg, kv, out, k)
        med_end = np.median(np.array(ends), axis=0) / 1000
        print(
            f"n={w} b={b} k={k} {args.lengths} {route.config.name} p{route.parts}: "
            f"event {t_ev:.1f} exact {exact} | rows by end: median {np.median(med_end):.2f}, "
            "slowest:"
        )
        for r in np.argsort(-med_end)[: args.top]:
            seen = {m: [p[r][m] for p in phases if m in p[r]] for m in names}
            shown = "  ".join(f"{m} {np.median(v) / 1000:.2f}" for m, v in seen.items() if v)
            ctas = int((rows_of == r).sum())
            print(
                f"    row {r:3d} n={lens[r]:6d} ctas {ctas} end {med_end[r]:.2f} | {shown}",
                flush=True,
            )


if __name__ == "__main__":
    main()
