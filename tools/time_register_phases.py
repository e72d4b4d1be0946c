"""Where a register-resident row spends its time, on the GPU::

    python3 tools/time_register_phases.py                     # b = 1, n = 4,096 / 16,384
    python3 tools/time_register_phases.py --ns 16384 --ks 512 --batches 1,132

Each cell is routed as the dispatcher routes a decode call (``gvr_kernels.routing.route_static``)
with the register-resident and streaming families only (few rows of 8,193-16,384 scores would
otherwise run on the cluster family), and must land on the register-resident family. That
configuration is compiled twice: as
routed, and with ``stamp_phases`` (thread 0 of every CTA stamps ``%globaltimer`` at the
boundaries of ``gvr_kernels.register.config.STAMPS``; the stamps change no result). For each of
30 launches, the L2 flushed before each, the tool reads every CTA's phases (the time from each
boundary it stamped to the next; a path that skips a boundary folds its time into the next
one) and takes their median over the CTAs, then the median over the launches, in
microseconds, beside the event time of the routed kernel (CUDA events, median of 40) and the
slowest CTA's total. The stamped answer is checked against ``torch.topk`` (the selected values
as multisets), on gaussian float32 rows of full length.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from phase_timing import WRAP, stamp_spans  # noqa: E402


def cta_phases(stamps: np.ndarray, names: tuple[str, ...]) -> list[dict[str, float]]:
    """Per CTA (rows of ``stamps``, int64 ``[grid, >= len(names)]``, zero where a boundary was
    not stamped), the ns from each stamped boundary to the next stamped one, keyed by the
    later boundary's name, and ``total`` (first to last stamp); the stamps wrap every
    ``2**31`` ns. CTAs that stamped fewer than two boundaries are left out."""
    out = []
    for row in stamps:
        hit = [i for i in range(len(names)) if row[i] != 0]
        if len(hit) < 2:
            continue
        ph = stamp_spans(row, names)
        ph["total"] = float((int(row[hit[-1]]) - int(row[hit[0]])) % WRAP)
        out.append(ph)
    return out


def launch_summary(per_cta: list[dict[str, float]], names: tuple[str, ...]) -> dict[str, float]:
    """One launch: the median over its CTAs of each phase, and the slowest CTA's total
    (``slowest``)."""
    med = {}
    for m in names[1:] + ("total",):
        vals = [p[m] for p in per_cta if m in p]
        if vals:
            med[m] = float(np.median(vals))
    if per_cta:
        med["slowest"] = max(p["total"] for p in per_cta)
    return med


def main() -> None:
    from gvr_kernels.register.config import STAMPS
    from phase_timing import cell_args, time_phases

    def skip(route):
        return None if route.config.family == "register" else "not the register family"

    def read(stamps, route, row):
        # (every row's CTA: the summary is the launch's, whatever ``--row``)
        return launch_summary(cta_phases(stamps, STAMPS), STAMPS) or None

    names = STAMPS[1:] + ("total", "slowest")
    time_phases(cell_args("4096,16384"), skip, read, names, families=("register", "streaming"))


if __name__ == "__main__":
    main()
