"""Shared-memory control words, named phase modes, and the records the phases take.

Every kernel of the GVR families keeps a few Int32 control words in shared memory; the phases
that cooperate through them (staging, radix narrowing, emission, the split-row meeting) agree
on the indices of :class:`Ctl`. The phases take their inputs as explicit records
(:func:`shared_arrays`, :class:`Window`) and their variants as named modes (:class:`Source`,
:class:`Rank`, :class:`Goal`, :class:`Action`), all compile-time Python values.
"""

from __future__ import annotations

import collections
import functools
from typing import Any, NamedTuple

__all__ = [
    "Ctl",
    "Source",
    "Rank",
    "Goal",
    "Action",
    "shared_arrays",
    "Window",
    "HistArgs",
    "EmitArgs",
    "RegisterRow",
]


class Ctl:
    """Indices of the control words (Int32 view of the ``ctl`` array)."""

    CNT = 0  # survivors staged by this CTA (counts past the capacity)
    B = 1  # crossing bin of the last radix level
    ABOVE = 2  # count above that bin
    COUNT_B = 3  # count in that bin
    GT = 4  # emission cursor for keys above the threshold
    EQ = 5  # emission cursor for keys equal to the threshold
    BCAST = 6  # block broadcast scratch
    LAST = 7  # split: this CTA arrived last
    TOTAL = 8  # split: survivors of the whole row
    MAXKEY = 9  # largest staged key (atomic max through the Uint32 view)
    EQCNT = 10  # register family, crowded rung: keys equal to the rung
    CODE = 11  # streaming: the row's path code so far, kept here across the streaming pass
    THR = 12  # streaming: the rung, kept here across the streaming pass (Uint32 bits)
    N = 13  # streaming: the row length, kept here across the streaming pass
    BIAS = 14  # bracket families: float32 bits of the bracket's bias (reread by the emission)
    SMAX = 14  # streaming: largest sample key (the rung's bracket; a split row's survivor bins)
    CMIN = 15  # register family, bracket: complement of the crossing bin's smallest key
    CMAX = 16  # register family, bracket: the crossing bin's largest key
    SCALE = 17  # bracket families: float32 bits of the bracket's scale (reread by the emission)
    SLOW = 16  # streaming: complement of the sample's smallest key (CMAX's word)
    # streaming family, ragged split (past the zeroed words: set once, read after the pass)
    RROW = 18  # this CTA's row (-1: no work)
    RPART = 19  # this CTA's part of its row
    RPARTS = 20  # CTAs of its row
    RSLOT = 21  # the workspace row slot its row meets in (split rows)
    # streaming family, cluster split (the same words: a cluster split is never ragged; zeroed
    # with the others at the row's start, before the cluster's first barrier)
    XTOTAL = 18  # survivors of the whole row (every CTA adds its count to every CTA's word)
    XCUR = 19  # the leader's cursors: keys above the crossing bin emitted (low 16 bits) and
    # entries sent to the top of its staging (high 16 bits)
    XOWN = 20  # the leader's own entries packed at the bottom of its staging


class Source:
    """Candidate sources of a radix level."""

    SAMPLE = 0  # the row sample (keys in shared memory)
    STAGE = 1  # the staged survivors (bits and positions in shared memory)
    ROW = 2  # the whole row, re-read from global memory
    REGS = 3  # the row held in registers (a RegisterRow)


class Rank:
    """What a radix level ranks."""

    BY_KEY = 0  # the order key of each candidate
    BY_INDEX = 1  # ``KEY_MAX - index`` of the candidates whose key equals one key (ties)


class Goal:
    """What a radix narrowing stops at."""

    RUNG = 0  # a threshold with ``target <= #(keys >= T) <= 2 * target`` (or a single key)
    SELECT = 1  # the exact rule "keys above thr, plus need_eq keys equal to thr"


class Action:
    """What the whole-row visitor does with each score."""

    HIST = 0  # count a radix level
    EMIT = 1  # emit the selection
    HIST_WARP = 2  # count a radix level, whole warps together (a crowded bin: one atomic)


@functools.cache
def _arrays_type(names: tuple[str, ...]) -> type:
    return collections.namedtuple("SharedArrays", names)


def shared_arrays(**arrays: Any) -> tuple:
    """The shared-memory arrays of a CTA, by name (``hist``, ``ctl``, ``sample``, ...), as a
    family's ``shared_layout()`` declares them: a named tuple (one type per set of names),
    which the DSL carries through dynamic control flow like any tuple of tensors. A phase
    that reads an array the family does not allocate fails at trace time with an
    ``AttributeError`` naming it."""
    return _arrays_type(tuple(arrays))(**arrays)


class Window(NamedTuple):
    """A row's valid window as the phases address it.

    Attributes:
        base: pointer to the 16-byte-aligned element at or below the window start.
        lead: window start modulo 4; lanes ``< lead`` of vector 0 lie before the window.
        nvec: whole 16-byte vectors from ``base``.
        tail_start: first window position not covered by a whole vector.
        n: valid length.
    """

    base: Any
    lead: Any
    nvec: Any
    tail_start: Any
    n: Any


class HistArgs(NamedTuple):
    """Inputs of one radix level's count (the ``Action.HIST`` visitor)."""

    rank: int
    lo: Any
    hi: Any
    shift: Any
    eq_key: Any


class EmitArgs(NamedTuple):
    """Inputs of the emission (the ``Action.EMIT`` visitor)."""

    out: Any
    values: Any
    row: Any
    k: Any
    n_gt: Any
    need_eq: Any
    thr: Any
    idx_max: Any


class RegisterRow(NamedTuple):
    """A row held in the registers of a CTA (``Source.REGS``), as each thread sees its part.

    Slot ``i`` of the ``vec * vecs`` vector slots (``vec`` scores per 16-byte vector: 4
    float32, 8 bfloat16 / float16) is lane ``q = i % vec`` of vector ``j = i // vec``, at
    window position ``p0 + j * vec * threads + q``; the last slot is the tail score at
    ``tail_pos``. Slots outside the window hold key 0, which no selection range contains
    (every real score's key is at least ``key(-inf) = 0x007FFFFF``; ranges start at 1).
    Only DSL values live here (the tuple is carried through dynamic control flow); the CTA
    size comes from the configuration at each use.

    Attributes:
        keys: the slots' order keys (a list of ``Uint32``; its length is ``vec * vecs + 1``),
            or their raw bits where a phase says so.
        p0: window position of slot 0 (``Int32``).
        tail_pos: window position of the tail slot (``Int32``).
    """

    keys: Any
    p0: Any
    tail_pos: Any

    def pos(self, i: int, cfg):
        """Window position of slot ``i`` (a trace-time index) in a CTA of configuration
        ``cfg`` (its ``threads`` and the ``vec`` of its ``key_format``)."""
        if i == len(self.keys) - 1:
            return self.tail_pos
        vec = cfg.key_format.vec
        return self.p0 + ((i // vec) * vec * cfg.threads + i % vec)
