"""``tools/time_split_phases.py`` reads a split row's phases off its CTAs' stamps (CPU)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))

from gvr_kernels.streaming.config import STAMP_WORDS, STAMPS  # noqa: E402
from time_split_phases import WRAP, phases  # noqa: E402


def _cta(t0: int, steps: list[int]) -> np.ndarray:
    row = np.zeros(STAMP_WORDS, dtype=np.int64)
    t = t0
    for i, dt in enumerate(steps):
        t += dt
        row[i] = t % WRAP
    return row


def test_phases_of_the_finishing_cta():
    # CTA 1 enters 300 ns after CTA 0 (past the timer's wrap) and finishes the row; CTA 0
    # stops at its arrival.
    upto_arrive = STAMPS.index("arrive") + 1
    assert STAMPS[upto_arrive:] == ("hist", "cross", "gather", "finish")
    a = _cta(WRAP - 250, [0, 100, 200, 300, 400, 50, 60, 70][:upto_arrive])
    steps = [0, 110, 210, 310, 410, 51, 61, 71, 30, 40, 500, 900]
    b = _cta(WRAP + 50, steps)
    st = np.stack([a, b, np.zeros(STAMP_WORDS, np.int64)])
    ph = phases(st, grid=3, parts=2)
    assert ph["entry"] == 300 and st[1, 0] == 50
    assert [ph[s] for s in STAMPS[1:]] == steps[1:]
    assert ph["total"] == 300 + sum(steps)
    assert ph["others"] == sum([0, 100, 200, 300, 400, 50, 60, 70])  # CTA 0's arrival
    # a row that does not meet on its bins stamps no hist / cross: the gather phase runs
    # from the arrival
    unbinned = st.copy()
    unbinned[1, [STAMPS.index("hist"), STAMPS.index("cross")]] = 0
    ph = phases(unbinned, grid=3, parts=2)
    assert "hist" not in ph and "cross" not in ph
    assert ph["gather"] == 30 + 40 + 500 and ph["total"] == 300 + sum(steps)
    # the finishing CTA of a workspace split stamps its linear selection's hist and cross
    # after its gather: the phases follow the stamps' times, not their words' order
    late = st.copy()
    t_gather = int(late[1, STAMPS.index("arrive")]) + 30
    late[1, STAMPS.index("gather")] = t_gather
    late[1, STAMPS.index("hist")] = t_gather + 40
    late[1, STAMPS.index("cross")] = t_gather + 40 + 500
    ph = phases(late, grid=3, parts=2)
    assert [s for s in ph if s in STAMPS][-4:] == ["gather", "hist", "cross", "finish"]
    assert (ph["gather"], ph["hist"], ph["cross"], ph["finish"]) == (30, 40, 500, 900)
    assert ph["total"] == 300 + sum(steps)
    # no finishing CTA (or two): no reading
    assert phases(st[[0, 0]], grid=2, parts=2) is None
    assert phases(st[[1, 1]], grid=2, parts=2) is None
