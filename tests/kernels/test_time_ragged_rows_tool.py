"""``tools/time_ragged_rows.py`` ranks a ragged launch's rows by when their last CTA ends
(CPU: the stamp arithmetic and the cells it reads)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from gvr_kernels.spec import H200

sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))

from phase_timing import stamp_spans  # noqa: E402
from time_ragged_rows import (  # noqa: E402
    CELLS,
    WRAP,
    cta_rows,
    parse_cells,
    row_ends,
    stamped_route,
)


def test_row_ends_take_each_rows_last_cta_from_the_launchs_first_stamp():
    # two rows of two CTAs; zero words are boundaries a CTA did not stamp
    st = np.array(
        [
            [1000, 1500, 0, 2600],  # row 0, CTA 0: ends at 2600
            [1100, 0, 0, 4100],  # row 0, CTA 1: ends at 4100 (the row's last)
            [900, 1900, 2900, 0],  # row 1, CTA 2: ends at 2900 (the row's last)
            [1000, 1200, 0, 0],  # row 1, CTA 3
        ],
        dtype=np.int64,
    )
    rows_of = np.array([0, 0, 1, 1])
    end, last = row_ends(st, rows_of, 2)
    assert end.tolist() == [4100 - 900, 2900 - 900] and last.tolist() == [1, 2]
    # the stamps are the low 31 bits of the timer: a launch across a wrap still orders
    wrapped = np.where(st != 0, (st + WRAP - 2000) % WRAP, 0)
    end_w, last_w = row_ends(wrapped, rows_of, 2)
    assert end_w.tolist() == end.tolist() and last_w.tolist() == last.tolist()


def test_stamp_spans_fold_a_skipped_boundary_into_the_next():
    names = ("entry", "window", "sample", "finish")
    assert stamp_spans(np.array([100, 400, 0, 1400]), names) == {"window": 300.0, "finish": 1000.0}


def test_stamp_spans_follow_the_times_of_a_finishing_cta():
    """A workspace split row's finishing CTA stamps ``publish`` after ``arrive`` and ``hist`` /
    ``cross`` after ``gather``: each phase runs from the boundary stamped before it in time,
    also across the timer's wrap."""
    from gvr_kernels.streaming.config import STAMPS

    order = ["entry", "window", "sample", "rung", "stream", "arrive", "publish", "gather",
             "hist", "cross", "finish"]  # fmt: skip
    steps = [0, 500, 1800, 1000, 3000, 400, 1100, 900, 1700, 300, 1500]
    for t0 in (1000, WRAP - 6000):
        row = np.zeros(len(STAMPS), np.int64)
        t = t0
        for name, dt in zip(order, steps, strict=True):
            t += dt
            row[STAMPS.index(name)] = t % WRAP
        spans = stamp_spans(row, STAMPS)
        assert spans == {name: float(dt) for name, dt in zip(order[1:], steps[1:], strict=True)}


def test_cells_read_only_routes_with_a_static_row_map():
    for w, b, k in CELLS:
        route, stamped = stamped_route(H200, w, b, k)
        assert stamped is not None and stamped.stamp_phases and stamped.family == "streaming"
        assert not stamped.ragged and route.grid % b == 0
    # the cluster-register family has no stamps
    assert stamped_route(H200, 65536, 8, 512)[1] is None


def test_ragged_splits_are_read_through_their_cpu_model():
    # routed (n = 262,144, 64 rows) and forced (n = 65,536, 256 rows: rows + SMs CTAs)
    for (w, b, k), force in (((262144, 64, 512), False), ((65536, 256, 512), True)):
        route, stamped = stamped_route(H200, w, b, k, ragged=force)
        assert stamped is not None and stamped.ragged and stamped.stamp_phases
        lens = np.full(b, 300)
        lens[-1] = w  # one long row takes a share of the extra CTAs
        rows_of = cta_rows(route, lens)
        assert rows_of.shape == (route.grid,)
        assert set(rows_of[rows_of >= 0].tolist()) == set(range(b))
        long = int((rows_of == b - 1).sum())
        assert long > 1 and (rows_of[:long] == b - 1).all()  # split rows take the first CTAs
    assert route.grid == 256 + H200.sm_count and route.workspace_words > 0
    # none between half the SMs and the SMs (one CTA a row, no split to share out)
    assert stamped_route(H200, 65536, 100, 512, ragged=True)[1] is None
    # an idle CTA ends no row; a row's end is its last CTA's
    st = np.array([[100, 900], [100, 0], [200, 500]], dtype=np.int64)
    end, last = row_ends(st, np.array([0, -1, 0]), 1)
    assert end.tolist() == [800] and last.tolist() == [0]


def test_cells_parse():
    assert parse_cells("65536:256:512,262144:8:2048") == [(65536, 256, 512), (262144, 8, 2048)]


def test_cell_lengths_of_each_kind():
    from time_ragged_rows import cell_lengths

    equal = cell_lengths("equal", 64, 65536)
    assert equal.shape == (64,) and (equal == 65536).all()
    ragged = cell_lengths("ragged", 64, 65536)
    assert ragged.shape == (64,) and ragged.max() == 65536 and (ragged < 65536).sum() > 32
    with pytest.raises(ValueError, match="lengths"):
        cell_lengths("full", 64, 65536)
