"""The ragged split's assignment of CTAs to rows (``gvr_reference.ragged``), the CPU model of
the streaming kernel's in-kernel assignment."""

from __future__ import annotations

import numpy as np
import pytest
from gvr_reference.ragged import MIN_PART, UNIT, ragged_blocks, ragged_parts, ragged_slots
from hypothesis import given, settings
from hypothesis import strategies as st


@settings(max_examples=300, deadline=None)
@given(
    lengths=st.lists(st.integers(0, (1 << 26) - 1), min_size=1, max_size=300),
    per_row=st.integers(1, 40),
    extra=st.integers(0, 64),
)
def test_every_row_gets_its_ctas_within_the_grid(lengths, per_row, extra):
    grid = len(lengths) * per_row + extra
    parts = ragged_parts(lengths, grid, MIN_PART)
    assert parts.min() >= 1 and parts.sum() <= grid
    blocks = ragged_blocks(lengths, grid, MIN_PART)
    busy = blocks[blocks[:, 0] >= 0]
    # every (row, part) exactly once, with the row's part count
    assert len(busy) == parts.sum()
    pairs = {(int(r), int(p)) for r, p, _ in busy}
    assert pairs == {(r, p) for r in range(len(lengths)) for p in range(parts[r])}
    assert all(int(q) == parts[int(r)] for r, _, q in busy)


@settings(max_examples=400, deadline=None)
@given(
    lengths=st.lists(
        st.one_of(st.integers(0, 4096), st.integers(0, (1 << 26) - 1)), min_size=1, max_size=600
    ),
    extra=st.integers(0, 300),
    data=st.data(),
)
def test_split_rows_meet_in_distinct_slots_within_the_workspace(lengths, extra, data):
    """Every row of several CTAs gets its own workspace slot, below ``min(rows, extra)`` (the
    slots the router allocates), whether the rows outnumber the extra CTAs or not."""
    if data.draw(st.booleans()):  # rows of one length (the uniform launch)
        lengths = [lengths[0]] * len(lengths)
    rows = len(lengths)
    grid = rows + extra
    parts = ragged_parts(lengths, grid, MIN_PART)
    slots = ragged_slots(lengths, grid, MIN_PART)
    split = parts > 1
    assert (slots[~split] == -1).all()
    used = slots[split]
    assert len(set(used.tolist())) == used.size
    assert used.size == 0 or (0 <= used.min() and used.max() < min(rows, extra))
    # the slot is the row while the extra CTAs outnumber the rows, else half the first CTA
    blocks = ragged_blocks(lengths, grid, MIN_PART)
    for r in np.flatnonzero(split):
        first = int(np.flatnonzero((blocks[:, 0] == r) & (blocks[:, 1] == 0))[0])
        assert slots[r] == (r if rows <= extra else first // 2)


def test_parts_follow_the_lengths():
    # one long row among short ones takes the CTAs the short rows do not need
    lengths = [262144] + [1000] * 7
    parts = ragged_parts(lengths, 8 * 16, MIN_PART)
    assert parts[0] == 262144 // MIN_PART and (parts[1:] == 1).all()
    # equally long rows share the grid evenly: the static split's parts
    assert (ragged_parts([262144] * 8, 8 * 16, MIN_PART) == 16).all()
    assert (ragged_parts([65536] * 32, 32 * 4, MIN_PART) == 4).all()
    # a part is never shorter than MIN_PART scores
    assert (ragged_parts([4 * MIN_PART], 132, MIN_PART) == 4).all()
    # no CTAs beyond one per row: every row on one CTA
    assert (ragged_parts([10**6, 5], 2, MIN_PART) == 1).all()
    assert ragged_parts([UNIT * 3 + 1], 1, MIN_PART).tolist() == [1]


def test_split_rows_take_the_first_ctas_then_single_rows_then_none():
    lengths = [100, 200000, 50, 100000]
    blocks = ragged_blocks(lengths, 4 * 8, MIN_PART)
    parts = ragged_parts(lengths, 4 * 8, MIN_PART)
    at = int(parts[1])
    assert (blocks[:at, 0] == 1).all() and (blocks[:at, 1] == np.arange(at)).all()
    assert (blocks[at : at + parts[3], 0] == 3).all()
    at += int(parts[3])
    assert blocks[at].tolist() == [0, 0, 1] and blocks[at + 1].tolist() == [2, 0, 1]
    assert (blocks[at + 2 :, 0] == -1).all()


@pytest.mark.parametrize("lengths, grid, match", [([1, 2, 3], 2, "grid"), ([5, -1], 4, "lengths")])
def test_bad_arguments(lengths, grid, match):
    with pytest.raises(ValueError, match=match):
        ragged_parts(lengths, grid, MIN_PART)
