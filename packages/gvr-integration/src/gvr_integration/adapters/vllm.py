"""vLLM's per-row top-K ops (``top_k_per_row_decode`` / ``top_k_per_row_prefill``), served by
GVR.

Drop-in stand-ins for ``torch.ops._C.top_k_per_row_*``: same positional arguments, results
written into ``indices``, nothing returned.

Peer conventions followed here:

- The logits are addressed through the explicit ``num_rows``, ``stride0`` and ``stride1``
  arguments, not the tensor's own shape and strides: element ``(r, c)`` is
  ``logits.data_ptr()[r * stride0 + c * stride1]`` for ``r < num_rows`` and
  ``c < logits.shape[1]`` (:func:`~gvr_integration.adapters._common.strided_logits`).
  A ``stride1`` other than 1 is served, through a copy on CUDA (refused under graph capture).
- ``indices`` is written at flat offset ``r * top_k`` per row (flat-packed when the buffer is
  wider than ``top_k``), ``-1`` in the slots a short row does not fill.
- Decode: ``seq_lens`` ``(B,)`` (or ``(B, 1)``) holds total KV lengths; row ``r`` ends at
  ``seq_lens[r // next_n] - next_n + r % next_n + 1``. When ``seq_lens`` holds more entries
  than ``num_rows // next_n``, the first ones are used, as the peer's kernel does. A 2-D
  ``(B, next_n)`` tensor with ``next_n > 1`` is the per-row layout of native speculative
  decoding (vLLM's indexer dispatch): entry ``[b, i]`` is row ``b * next_n + i``'s own end.
- Prefill: row ``r`` ranks ``[row_starts[r], row_ends[r])`` and reports window-local indices.
- Decode lengths are in logits columns (the peer has no compression argument).

Differences from the peer, on the safe side: row ends are clamped to ``logits.shape[1]`` (the
peer reads past it if told to); K is limited to 2048 on CUDA (the peer takes any K; the CPU
engine here does too); ``num_rows`` must be a multiple of ``next_n``.
"""

from __future__ import annotations

import torch

from .. import ops
from ._common import check_int, check_tensor, envelope_tokens, packed_rows, strided_logits

__all__ = ["top_k_per_row_decode", "top_k_per_row_prefill"]


def top_k_per_row_decode(logits, next_n, seq_lens, indices, num_rows, stride0, stride1, top_k):
    """Decode top-K in vLLM's ``top_k_per_row_decode`` call shape; fills ``indices``.

    Args:
        logits: float32 tensor whose storage holds the rows (see the module docstring);
            ``logits.shape[1]`` is the row width.
        next_n: rows per request, ``>= 1``.
        seq_lens: int32 contiguous ``(B,)`` / ``(B, 1)`` total KV lengths per request, or
            ``(B, next_n)`` per-row ends; at least ``num_rows // next_n`` requests.
        indices: int32 contiguous, at least ``num_rows * top_k`` elements.
        num_rows: rows to process (a multiple of ``next_n``).
        stride0, stride1: element strides of the rows and columns in ``logits``' storage.
        top_k: K.

    Returns:
        None (the answer is in ``indices``).

    Raises:
        TypeError: wrong types or dtypes.
        ValueError: a view outside the storage, too few ``seq_lens``, a too-small ``indices``,
            ``num_rows`` not a multiple of ``next_n``, K > 2048 on CUDA.
    """
    next_n = check_int(next_n, "next_n", minimum=1)
    num_rows = check_int(num_rows, "num_rows", minimum=0)
    k = check_int(top_k, "top_k", minimum=1)
    view = strided_logits(
        logits, num_rows, check_int(stride0, "stride0"), check_int(stride1, "stride1")
    )
    device = logits.device
    check_tensor(seq_lens, "seq_lens", dim=(1, 2), dtype=torch.int32, device=device)
    check_tensor(seq_lens, "seq_lens", contiguous=True)
    out = packed_rows(indices, num_rows, k, "indices", device)
    if num_rows % next_n:
        raise ValueError(f"num_rows ({num_rows}) must be a multiple of next_n ({next_n})")
    per_row = seq_lens.dim() == 2 and seq_lens.shape[1] == next_n and next_n > 1
    if per_row:
        lens, step = seq_lens.reshape(-1), 1
    else:
        if seq_lens.dim() == 2 and seq_lens.shape[1] != 1:
            raise ValueError(
                f"seq_lens must be (B,), (B, 1) or (B, next_n={next_n}), got "
                f"{tuple(seq_lens.shape)}"
            )
        lens, step = seq_lens.reshape(-1), next_n
    need = num_rows // step
    if lens.shape[0] < need:
        raise ValueError(
            f"seq_lens must cover {num_rows} rows: need {need} entries, got {lens.shape[0]}"
        )
    ops.topk_decode(
        view,
        lens[:need],
        k,
        next_n=step,
        out=out,
        max_seq_len=envelope_tokens(view.shape[1], 1),
    )


def top_k_per_row_prefill(logits, row_starts, row_ends, indices, num_rows, stride0, stride1, top_k):
    """Prefill top-K in vLLM's ``top_k_per_row_prefill`` call shape; fills ``indices``.

    Row ``r < num_rows`` selects from ``[row_starts[r], row_ends[r])`` (clamped to the width)
    and reports window-local indices.

    Args:
        logits: float32 tensor whose storage holds the rows (see the module docstring).
        row_starts, row_ends: int32 contiguous, at least ``num_rows`` entries.
        indices: int32 contiguous, at least ``num_rows * top_k`` elements.
        num_rows: rows to process.
        stride0, stride1: element strides of rows and columns.
        top_k: K.

    Returns:
        None (the answer is in ``indices``).

    Raises:
        TypeError: wrong types or dtypes.
        ValueError: a view outside the storage, too few window entries, a too-small
            ``indices``, K > 2048 on CUDA.
    """
    num_rows = check_int(num_rows, "num_rows", minimum=0)
    k = check_int(top_k, "top_k", minimum=1)
    view = strided_logits(
        logits, num_rows, check_int(stride0, "stride0"), check_int(stride1, "stride1")
    )
    device = logits.device
    bounds = []
    for name, t in (("row_starts", row_starts), ("row_ends", row_ends)):
        check_tensor(t, name, dim=1, dtype=torch.int32, device=device, contiguous=True)
        if t.shape[0] < num_rows:
            raise ValueError(f"{name} must have at least {num_rows} entries, got {t.shape[0]}")
        bounds.append(t[:num_rows])
    out = packed_rows(indices, num_rows, k, "indices", device)
    ops.topk_prefill(view, bounds[0], bounds[1], k, out=out)
