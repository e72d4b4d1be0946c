"""The device loop both phase tools share (``time_split_phases.py``, ``time_register_phases.py``):
per cell, route a decode call, compile the routed configuration as routed and with
``stamp_phases``, read the stamps of ``reps`` cold-L2 launches (``--warm-l2``: the L2 left
warm), check the stamped answer against ``torch.topk``, time the routed kernel (CUDA events,
median of 40) and print the medians of the phases in microseconds."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import replace

import numpy as np

#: The stamps are the low 31 bits of ``%globaltimer`` (ns): they wrap every ``2**31`` ns.
WRAP = 1 << 31


def stamp_spans(row: np.ndarray, names: tuple[str, ...]) -> dict[str, float]:
    """One CTA's stamps (``row``, zero where a boundary was not stamped): the ns from each
    stamped boundary of ``names`` to the next stamped one in time, keyed by the later boundary's
    name (a path that skips a boundary folds its time into the next). The boundaries are taken
    in the order of their times, not of ``names``: a workspace split row's finishing CTA stamps
    ``publish`` after ``arrive`` and ``hist`` / ``cross`` after ``gather``
    (``gvr_kernels.streaming.config.STAMPS``); the times are read relative to the first
    stamped boundary, as the stamps wrap every :data:`WRAP` ns."""
    hit = [i for i in range(len(names)) if row[i] != 0]
    if not hit:
        return {}
    t0 = int(row[hit[0]])
    rel = {i: (int(row[i]) - t0 + WRAP // 2) % WRAP - WRAP // 2 for i in hit}
    hit.sort(key=lambda i: (rel[i], i))
    return {names[b]: float(rel[b] - rel[a]) for a, b in zip(hit, hit[1:], strict=False)}


def selection_exact(logits, kv, out, k: int) -> bool:
    """Whether every row's selection (``out``, int32 ``[rows, k]``) holds the values of
    ``torch.topk`` over its window ``logits[r, :kv[r]]``, as multisets (a row of at most ``k``
    scores: its first ``kv[r]`` slots)."""
    import torch

    exact = True
    for r, m in enumerate(kv.tolist()):
        sel = out[r, : min(m, k)].long()
        want = torch.sort(torch.topk(logits[r, :m], min(m, k)).values).values
        exact &= bool(torch.equal(torch.sort(logits[r, sel]).values, want))
    return exact


def cell_args(default_ns: str, extra: Callable | None = None) -> argparse.Namespace:
    """The tools' command line: ``--ns``, ``--ks``, ``--batches``, ``--reps``, ``--rows-from``
    / ``--row``, and what ``extra(parser)`` adds."""
    import __main__

    ap = argparse.ArgumentParser(description=(__main__.__doc__ or "").split("\n\n")[0])
    ap.add_argument("--ns", default=default_ns)
    ap.add_argument("--ks", default="512,1024,2048")
    ap.add_argument("--batches", default="1")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument(
        "--rows-from", default=None,
        help="a safetensors file of float32 score rows (`logits` [rows, width], `lengths` "
        "[rows], as in data/real-rows): one cell a K of those rows (decode, n = the width) "
        "instead of --ns / --batches of gaussian rows",
    )  # fmt: skip
    ap.add_argument("--row", type=int, default=0, help="the row whose phases are read")
    ap.add_argument(
        "--warm-l2", action="store_true",
        help="no L2 flush before a launch: the row, the workspace and the kernel's code stay "
        "in L2 from the launch before (a phase that reads neither the row nor new code "
        "should not change; one that fetches cold code or rows does); no event time is taken",
    )  # fmt: skip
    if extra is not None:
        extra(ap)
    return ap.parse_args()


def time_phases(
    args: argparse.Namespace,
    skip: Callable,
    read: Callable,
    names: tuple[str, ...],
    families: tuple[str, ...] | None = None,
    route_of: Callable | None = None,
) -> None:
    """Run every cell of ``args``. ``skip(route)``: why the route is not one the tool reads
    (None to read it); ``read(stamps, route, row)``: the phases (ns) of row ``row``
    (``args.row``) in one launch's stamps (int64 ``[grid, STAMP_WORDS]``), or None;
    ``names``: the phases printed (in the order ``read`` returns them); ``families``: the
    families the router may pick (``route_static``'s argument; None: all);
    ``route_of(spec, rows, n, k)``: the route of a cell instead of the router's."""
    import torch
    from device_streaming import timeit, timing_setup
    from gvr_kernels.abi import KernelArgs
    from gvr_kernels.compile import compile_config
    from gvr_kernels.family import STAMP_WORDS
    from gvr_kernels.routing import route_static
    from gvr_kernels.spec import spec_from_properties

    spec = spec_from_properties(torch.cuda.get_device_properties(0))
    flush = timing_setup()
    warm = getattr(args, "warm_l2", False)
    if warm:
        flush = torch.empty(1, device="cuda")  # (zeroing it flushes nothing)
    dummy_i = torch.zeros(1, dtype=torch.int32, device="cuda")
    fns = {}
    given = None
    cells = [
        (b, n, k)
        for b in map(int, args.batches.split(","))
        for n in map(int, args.ns.split(","))
        for k in map(int, args.ks.split(","))
    ]
    if args.rows_from:
        from safetensors.torch import load_file

        rows = load_file(args.rows_from)
        given = (rows["logits"].float().cuda(), rows["lengths"].int().cuda())
        b, n = given[0].shape
        cells = [(b, n, k) for k in map(int, args.ks.split(","))]
    for b, n, k in cells:
        kw = {} if families is None else {"families": families}
        if route_of is None:
            route = route_static(spec, rows=b, n_env=n, k=k, **kw)
        else:
            route = route_of(spec, b, n, k)
        cfg = route.config
        why = skip(route)
        if why is not None:
            print(f"b={b} n={n} k={k}: routed to {cfg.name}, {why}; skipped")
            continue
        stamped_cfg = replace(cfg, stamp_phases=True)
        for c in (cfg, stamped_cfg):
            if c not in fns:
                fns[c] = compile_config(c)
        if given is None:
            g = torch.Generator(device="cuda").manual_seed(n + k + b)
            lg = torch.randn(b, n, generator=g, device="cuda")
            kv = torch.full((b,), n, dtype=torch.int32, device="cuda")
        else:
            lg, kv = given
        ws = torch.zeros(max(route.workspace_words, 4), dtype=torch.int32, device="cuda")
        out = torch.empty((b, k), dtype=torch.int32, device="cuda")
        stamps = torch.zeros(route.grid * STAMP_WORDS, dtype=torch.int32, device="cuda")
        base = KernelArgs(
            logits=lg, lens_a=kv, lens_b=dummy_i, out=out,
            values=torch.empty(1, 1, device="cuda"), workspace=ws.view(torch.uint32),
            paths=stamps, k=k, next_n=1, cr_shift=0, parts=route.parts,
            block_max=torch.zeros(1, 1, device="cuda"),
        )  # fmt: skip
        runs = []
        for _ in range(args.reps):
            flush.zero_()
            stamps.zero_()
            fns[stamped_cfg](*base)
            torch.cuda.synchronize()
            st = stamps.view(route.grid, STAMP_WORDS).cpu().numpy().astype(np.int64)
            ph = read(st, route, args.row)
            if ph is not None:
                runs.append(ph)
        exact = selection_exact(lg, kv, out, k)
        plain = base._replace(paths=dummy_i)
        # (with the L2 left warm the loop's zeroing is too short to hide the host's launch
        # time, which the events would then include: no event time)
        t_ev = float("nan") if warm else timeit(lambda a=plain: fns[cfg](*a), flush, 40)
        # in the order the readings give them (a reader may order a CTA's boundaries by time)
        seen = list(dict.fromkeys(m for r in runs for m in r))
        med = {m: np.median([r[m] for r in runs if m in r]) / 1000 for m in seen if m in names}
        shown = "  ".join(f"{m} {v:.2f}" for m, v in med.items())
        parts = f" p{route.parts}" if route.parts > 1 else ""
        what = f" row {args.row} of {args.rows_from}" if given is not None else ""
        print(
            f"b={b} n={n} k={k}{what} {cfg.name}{parts}: exact {exact} event {t_ev:.1f} | "
            f"{shown}  ({len(runs)} launches)",
            flush=True,
        )
