"""The device ``ops`` namespace for :func:`gvr_reference.ladder.row_plan`, and unsigned
minimum / maximum.

The ladder arithmetic is written once, in ``gvr_reference.ladder``, against an ``ops`` object
with ``min``/``max``/``select``; on the host those are Python builtins, here they are the
CuTe DSL's, so the kernels trace exactly the same integer formulas the host router and the CPU
model evaluate.
"""

from __future__ import annotations

from types import SimpleNamespace

import cutlass
import cutlass.cute as cute
from cutlass import Uint32

DEVICE_OPS = SimpleNamespace(
    min=cutlass.min,
    max=cutlass.max,
    select=cutlass.select_,
)


@cute.jit
def umin(a: Uint32, b: Uint32) -> Uint32:
    """Unsigned minimum by an explicit unsigned compare: ``cutlass.min`` / ``cutlass.max`` of
    ``Uint32`` values whose first operand is a constant (``0xFFFFFFFF``, ``0``) compile as a
    *signed* minimum / maximum (seen on CuTe DSL 4.8.1), which misorders every key with the
    top bit set."""
    return Uint32(cutlass.select_(a < b, a, b))


@cute.jit
def umax(a: Uint32, b: Uint32) -> Uint32:
    """Unsigned maximum by an explicit unsigned compare (see :func:`umin`)."""
    return Uint32(cutlass.select_(b > a, b, a))
