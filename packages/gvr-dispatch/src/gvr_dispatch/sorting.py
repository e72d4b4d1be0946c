"""The ``sorted=True`` epilogue: order each row of a top-K answer on the device, in place.

Order: descending value, ties by ascending index, ``-1`` padding last. Values compare through
the same order key as the oracle (``gvr_reference.keys.order_key``): NaN above ``+inf``,
``-0.0`` and ``+0.0`` one value. One sort per row over a 64-bit composite key makes the order
total without relying on sort stability:

    composite = order_key(value) << 31 | (2**31 - 1 - index)     (valid slots)
    composite = -1                                                (padding)

An order key of a non-NaN float is at least ``0x007FFFFF`` and NaN is canonicalised to
``0xFFFFFFFF``, so ``order_key << 31`` fits in 63 bits and every valid composite is positive;
indices are below ``2**26``. Descending composite order is then descending value, ascending
index, padding last.
"""

from __future__ import annotations

import torch

__all__ = ["order_key", "sort_rows_"]

_LOW31 = (1 << 31) - 1


def order_key(values: torch.Tensor) -> torch.Tensor:
    """int64 order keys of float32 ``values`` (NaN canonical, both zeros one key); bfloat16
    and float16 values are widened first (exact, order kept)."""
    if values.dtype is not torch.float32:
        values = values.float()
    u = values.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    key = torch.where(u >= 0x80000000, u ^ 0xFFFFFFFF, u ^ 0x80000000)
    key = torch.where(torch.isnan(values), 0xFFFFFFFF, key)
    return torch.where(u == 0x80000000, 0x80000000, key)


def sort_rows_(out: torch.Tensor, values: torch.Tensor) -> None:
    """Sort every row of ``out`` (int32 ``[rows, k]``) and ``values`` (float32, bfloat16 or
    float16 ``[rows, k]``) in place: descending value, ties by ascending index, ``-1`` last.

    ``values`` must hold the values of the selected indices (``-FLT_MAX`` beside ``-1``). Runs
    as a few torch kernels on the tensors' device; temporaries come from torch's allocator
    (under CUDA-graph capture: the graph's private pool).
    """
    if out.numel() == 0:
        return
    idx = out.to(torch.int64)
    composite = (order_key(values) << 31) | (_LOW31 - idx)
    composite = torch.where(idx >= 0, composite, -1)
    order = torch.argsort(composite, dim=1, descending=True)
    out.copy_(torch.gather(out, 1, order))
    values.copy_(torch.gather(values, 1, order))
