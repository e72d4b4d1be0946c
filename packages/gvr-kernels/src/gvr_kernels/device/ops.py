"""The device ``ops`` namespace for :func:`gvr_reference.ladder.row_plan`.

The ladder arithmetic is written once, in ``gvr_reference.ladder``, against an ``ops`` object
with ``min``/``max``/``select``; on the host those are Python builtins, here they are the
CuTe DSL's, so the kernels trace exactly the same integer formulas the host router and the CPU
model evaluate.
"""

from __future__ import annotations

from types import SimpleNamespace

import cutlass

DEVICE_OPS = SimpleNamespace(
    min=cutlass.min,
    max=cutlass.max,
    select=cutlass.select_,
)
