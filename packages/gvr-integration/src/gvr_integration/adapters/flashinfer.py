"""FlashInfer's ``top_k_varlen`` call shape, served by GVR.

A stand-in for ``flashinfer.top_k_varlen`` (the DSA indexer entry with backends ``gvr_2``,
``radix``, ...): same arguments, same return ``(indices, values_or_None)``, selection by
:mod:`gvr_integration.ops`.

Peer conventions followed here:

- ``seq_lens`` is the effective KV length per request in *uncompressed* tokens, shape
  ``(num_rows // next_n,)``; row ``r`` sees ``(seq_len - next_n + r % next_n + 1) //
  compress_ratio`` columns, clamped to ``[0, width]`` (the width, not the arena stride).
- ``max_seq_len`` is derived from the logits width times ``compress_ratio``: the call reads no
  device data on the host and can be captured in a CUDA graph.
- Output ``indices`` int32 ``(num_rows, top_k)``, local columns, ``-1`` past short rows;
  ``values`` fp32 with ``-FLT_MAX`` beside ``-1`` (the ``gvr_2`` convention), or ``0`` there
  with ``backend="radix_cutlass"`` (that backend's convention).
- A mismatch ``logits.shape[0] != seq_lens.shape[0] * next_n`` or ``next_n < 1`` raises
  ``ValueError``; so does an unknown backend.
- Windowed calls (``row_starts=``, FlashInfer #5304): row ``r`` ranks
  ``logits[r, row_starts[r] : row_starts[r] + seq_lens[r]]`` (end clamped to the width, a start
  at or past the width gives an empty row); indices are window-local unless
  ``absolute_indices=True``, which adds the (clamped) ``row_starts[r]`` to every valid index.

Accepted and ignored: ``pre_idx`` (hints only steer the peer's sampling; GVR is hint-free),
``load_balance``, ``approx_ties`` (GVR is always exact, which that mode allows). Looser than the
peer: any K up to 2048 on CUDA (the peer's ``gvr_2`` takes 512, 1024, 2048), any GPU GVR runs
on (Hopper included), CPU tensors too.
"""

from __future__ import annotations

import torch
from gvr_dispatch.validation import check_flag

from .. import ops
from ._common import check_int, check_tensor, envelope_tokens

__all__ = ["top_k_varlen", "BACKENDS"]

#: Backend names this adapter serves, and the value written beside each ``-1`` index.
BACKENDS = {"auto": None, "gvr_2": None, "radix_cutlass": 0.0}


def top_k_varlen(
    logits,
    seq_lens,
    top_k,
    pre_idx=None,
    compress_ratio=1,
    next_n=1,
    return_values=False,
    out_indices=None,
    out_values=None,
    backend="auto",
    load_balance=True,
    workspace=None,
    approx_ties=False,
    *,
    row_starts=None,
    absolute_indices=False,
):
    """Top-K of every row with per-request lengths, in FlashInfer's ``top_k_varlen`` shape.

    Args:
        logits: float32 ``(num_rows, width)``, unit inner stride preferred, any row stride.
        seq_lens: int32 ``(num_rows // next_n,)`` contiguous: uncompressed KV length per
            request; with ``row_starts``: ``(num_rows,)``, each row's window length.
        top_k: K.
        pre_idx: accepted and ignored.
        compress_ratio: power of two (1 or 4 in DSA); must be 1 with ``row_starts``.
        next_n: rows per request, ``>= 1``; must be 1 with ``row_starts``.
        return_values: also return the selected values.
        out_indices: optional int32 contiguous ``(num_rows, top_k)`` output.
        out_values: optional float32 contiguous ``(num_rows, top_k)`` output (implies values).
        backend: ``"auto"``, ``"gvr_2"`` or ``"radix_cutlass"`` (values padding ``0``).
        load_balance, approx_ties: accepted and ignored.
        workspace: optional ``{"gvr2_workspace": tensor}`` (or the tensor itself): a zeroed,
            16-byte-aligned CUDA buffer of at least ``gvr_dispatch.workspace_bytes()`` bytes
            for split launches on concurrent streams; other keys are ignored.
        row_starts: optional int32 ``(num_rows,)`` window starts (windowed mode).
        absolute_indices: windowed mode: report ``column`` instead of ``column - start``.

    Returns:
        ``(indices, values)``, ``values`` None unless requested.

    Raises:
        TypeError: wrong types or dtypes.
        ValueError: a row-count mismatch, ``next_n < 1``, an unknown backend, windowed mode
            with ``next_n != 1`` or ``compress_ratio != 1``, bad buffers, K > 2048 on CUDA.
    """
    del pre_idx, load_balance, approx_ties
    if backend not in BACKENDS:
        raise ValueError(
            f"backend {backend!r} is not served by the GVR adapter; use one of {sorted(BACKENDS)}"
        )
    check_tensor(logits, "logits", dim=2)
    check_tensor(seq_lens, "seq_lens", dim=1, dtype=torch.int32, device=logits.device)
    next_n = check_int(next_n, "next_n")
    if next_n < 1:
        raise ValueError(f"next_n must be >= 1, got {next_n}")
    top_k = check_int(top_k, "top_k", minimum=1)
    check_flag(return_values, "return_values")
    check_flag(absolute_indices, "absolute_indices")
    rows, width = logits.shape
    want_values = return_values or out_values is not None
    ws = workspace.get("gvr2_workspace") if isinstance(workspace, dict) else workspace

    if row_starts is None:
        if rows != seq_lens.shape[0] * next_n:
            raise ValueError(
                f"logits.shape[0] must equal seq_lens.shape[0] * next_n: "
                f"{rows} != {seq_lens.shape[0]} * {next_n}"
            )
        result = ops.topk_decode(
            logits,
            seq_lens,
            top_k,
            next_n=next_n,
            compress_ratio=compress_ratio,
            out=out_indices,
            values=out_values,
            return_values=want_values,
            max_seq_len=envelope_tokens(width, compress_ratio),
            workspace=ws,
        )
    else:
        if next_n != 1 or compress_ratio != 1:
            raise ValueError(
                f"windowed calls (row_starts) need next_n == 1 and compress_ratio == 1, got "
                f"next_n={next_n}, compress_ratio={compress_ratio}"
            )
        check_tensor(row_starts, "row_starts", dim=1, dtype=torch.int32, device=logits.device)
        if seq_lens.shape[0] != rows or row_starts.shape[0] != rows:
            raise ValueError(
                f"windowed calls need seq_lens and row_starts of shape ({rows},), got "
                f"{tuple(seq_lens.shape)} and {tuple(row_starts.shape)}"
            )
        # The end in int64, clamped to the width, so start + length cannot wrap in int32.
        row_ends = (row_starts.long() + seq_lens.long()).clamp(-(2**31), width).to(torch.int32)
        result = ops.topk_prefill(
            logits,
            row_starts,
            row_ends,
            top_k,
            out=out_indices,
            values=out_values,
            return_values=want_values,
            workspace=ws,
        )
    indices, values = result if want_values else (result, None)
    if row_starts is not None and absolute_indices:
        start = row_starts.clamp(0, width).unsqueeze(1)
        indices.copy_(torch.where(indices >= 0, indices + start, indices))
    pad = BACKENDS[backend]
    if values is not None and pad is not None:
        values.masked_fill_(indices < 0, pad)
    return indices, values
