"""``tools/time_register_phases.py`` reads a register-resident row's phases off its CTAs'
stamps (CPU)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))

from gvr_kernels.family import STAMP_WORDS  # noqa: E402
from gvr_kernels.register.config import STAMPS  # noqa: E402
from time_register_phases import WRAP, cta_phases, launch_summary  # noqa: E402


def _cta(t0: int, steps: dict[str, int]) -> np.ndarray:
    """A CTA's stamp words: ``steps`` maps a boundary to its ns after the previous one."""
    row = np.zeros(STAMP_WORDS, dtype=np.int64)
    t = t0
    for name, dt in steps.items():
        t += dt
        row[STAMPS.index(name)] = t % WRAP
    return row


def test_phases_per_cta_across_the_wrap_and_skipped_boundaries():
    bracket = {"entry": 0, "load": 1500, "reduce": 400, "count": 300, "crossing": 700}
    bracket["finish"] = 900
    # the sampled path stamps no count or crossing: its time folds into the finish
    sampled = {"entry": 0, "load": 1400, "reduce": 500, "finish": 5000}
    st = np.stack([_cta(WRAP - 1000, bracket), _cta(10, sampled), np.zeros(STAMP_WORDS)])
    per = cta_phases(st.astype(np.int64), STAMPS)
    assert len(per) == 2  # the third CTA stamped nothing
    assert per[0] == {**{k: float(v) for k, v in bracket.items() if k != "entry"}, "total": 3800}
    assert per[1] == {"load": 1400, "reduce": 500, "finish": 5000, "total": 6900}
    s = launch_summary(per, STAMPS)
    assert s["load"] == 1450 and s["reduce"] == 450 and s["finish"] == 2950
    assert s["count"] == 300 and s["crossing"] == 700  # only the CTA that stamped them
    assert s["total"] == (3800 + 6900) / 2 and s["slowest"] == 6900
