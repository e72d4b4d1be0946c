"""Helpers shared by the engine adapters: argument checks and the peers' buffer conventions.

Every helper reads tensor metadata only (shape, strides, dtype, device), never tensor data, so
the adapters stay free of host synchronisation and safe under CUDA-graph capture.
"""

from __future__ import annotations

import numbers

import torch
from gvr_dispatch.validation import check_compress_ratio

__all__ = [
    "check_int",
    "check_tensor",
    "packed_rows",
    "strided_logits",
    "envelope_tokens",
]


def check_int(value: object, name: str, *, minimum: int | None = None) -> int:
    """``value`` as an int (``bool`` refused), at least ``minimum`` when given.

    Raises:
        TypeError: not an integer.
        ValueError: below ``minimum``.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def check_tensor(
    x: object,
    name: str,
    *,
    dim: int | tuple[int, ...] | None = None,
    dtype: torch.dtype | None = None,
    device: torch.device | None = None,
    contiguous: bool = False,
) -> torch.Tensor:
    """Check a tensor argument's rank, dtype, device and contiguity.

    Raises:
        TypeError: not a tensor, or the wrong dtype.
        ValueError: the wrong rank or device, or not contiguous when required.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if dim is not None:
        dims = (dim,) if isinstance(dim, int) else dim
        if x.dim() not in dims:
            want = " or ".join(f"{d}-D" for d in dims)
            raise ValueError(f"{name} must be {want}, got shape {tuple(x.shape)}")
    if dtype is not None and x.dtype != dtype:
        raise TypeError(f"{name} must be {dtype}, got {x.dtype}")
    if device is not None and x.device != device:
        raise ValueError(f"{name} must be on the logits device {device}, got {x.device}")
    if contiguous and not x.is_contiguous():
        raise ValueError(f"{name} must be contiguous, got strides {tuple(x.stride())}")
    return x


def packed_rows(indices: torch.Tensor, rows: int, k: int, name: str, device) -> torch.Tensor:
    """The ``[rows, k]`` output view the CUDA peers write into an int32 ``indices`` buffer.

    TensorRT-LLM's ``indexer_topk_*`` ops, its ``run_varlen`` and vLLM's ``top_k_per_row_*``
    address row ``r`` of their output at ``indices.data_ptr() + r * k``, whatever the buffer's
    width: a buffer wider than ``k`` receives the answer *flat-packed* into its first
    ``rows * k`` elements, not into ``indices[:, :k]``. This returns that view (the buffer
    itself when it is exactly ``[rows, k]``); elements past ``rows * k`` are left untouched.

    Raises:
        TypeError: not an int32 tensor.
        ValueError: on another device, not contiguous, or fewer than ``rows * k`` elements.
    """
    check_tensor(indices, name, dtype=torch.int32, device=device, contiguous=True)
    if indices.dim() == 2 and tuple(indices.shape) == (rows, k):
        return indices
    if indices.numel() < rows * k:
        raise ValueError(
            f"{name} must hold at least rows * k = {rows} * {k} = {rows * k} elements, "
            f"got shape {tuple(indices.shape)}"
        )
    return indices.view(-1)[: rows * k].view(rows, k)


def strided_logits(
    logits: torch.Tensor, num_rows: int, stride0: int, stride1: int, name: str = "logits"
) -> torch.Tensor:
    """The ``[num_rows, logits.shape[1]]`` view of ``logits``' storage with the given strides.

    vLLM's per-row ops take the logits tensor plus explicit ``numRows``, ``stride0`` and
    ``stride1`` and address element ``(r, c)`` at ``logits.data_ptr() + r * stride0 +
    c * stride1``; this builds exactly that view (from the tensor's storage offset), after
    checking that it stays inside the storage.

    Raises:
        ValueError: a negative count or stride, or a view that runs past the storage.
    """
    check_tensor(logits, name, dim=2, dtype=torch.float32)
    width = logits.shape[1]
    if num_rows < 0 or stride0 < 0 or stride1 < 0:
        raise ValueError(
            f"num_rows, stride0 and stride1 must be >= 0, got {num_rows}, {stride0}, {stride1}"
        )
    offset = logits.storage_offset()
    if num_rows and width:
        last = offset + (num_rows - 1) * stride0 + (width - 1) * stride1
        have = logits.untyped_storage().nbytes() // logits.element_size()
        if last >= have:
            raise ValueError(
                f"{name} viewed as [{num_rows}, {width}] with strides ({stride0}, {stride1}) "
                f"from offset {offset} needs {last + 1} elements of storage, which holds {have}"
            )
    return logits.as_strided((num_rows, width), (stride0, stride1), offset)


def envelope_tokens(width: int, compress_ratio: int) -> int:
    """The decode envelope ``max_seq_len`` (uncompressed tokens) that a logits width implies.

    A peer call without a length bound is served with ``max_seq_len = width * compress_ratio``:
    the launch envelope is then the whole width, every row fits it (rows are clamped to the
    width, so larger lengths are harmless), the launch depends on shapes only, and nothing is
    read from the device to size it, so the call is capture-safe. The price: routing assumes
    rows as long as the width even when a batch's rows are shorter.

    Raises:
        TypeError, ValueError: ``compress_ratio`` is not a power of two in
            ``[1, MAX_COMPRESS_RATIO]`` (``gvr_dispatch.validation.check_compress_ratio``).
    """
    return max(width, 1) << check_compress_ratio(compress_ratio)
