"""Shared-memory control words and candidate sources of the streaming kernels.

Every kernel of the family allocates ``CTL_WORDS`` Int32 control words in shared memory; the
pieces that cooperate through them (staging, radix narrowing, emission, the split-row meeting)
agree on these indices.
"""

from __future__ import annotations

# Control words in shared memory (Int32 view).
_CNT = 0  # survivors staged by this CTA (counts past the capacity)
_B = 1  # crossing bin of the last radix level
_ABOVE = 2  # count above that bin
_COUNT_B = 3  # count in that bin
_GT = 4  # emission cursor for keys above the threshold
_EQ = 5  # emission cursor for keys equal to the threshold
_BCAST = 6  # block broadcast scratch
_LAST = 7  # split: this CTA arrived last
_TOTAL = 8  # split: survivors of the whole row
_MAXKEY = 9  # largest staged key (atomic max through the Uint32 view)

# Candidate sources of a radix level.
_SRC_SAMPLE = 0
_SRC_STAGE = 1
_SRC_ROW = 2

# Actions of the whole-row visitor.
_ACT_HIST = 0
_ACT_EMIT = 1
