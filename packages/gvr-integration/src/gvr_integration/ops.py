"""torch custom ops ``gvr::topk_decode`` and ``gvr::topk_prefill``, and their Python wrappers.

The ops are registered with ``torch.library`` in out-parameter form: they fill ``out`` (and
``values`` when given) in place and return nothing, so ``torch.compile(fullgraph=True)`` traces
them as one opaque mutating call and CUDA graphs capture the kernel launch behind them. Both
have implementations for CPU tensors (the numba CPU engine) and CUDA tensors (the GVR kernels),
each a call into :mod:`gvr_dispatch`, and a fake implementation that checks shapes, dtypes,
layouts and the integer arguments from metadata alone (what tracing and
``torch.library.opcheck`` run), raising the ``TypeError`` / ``ValueError`` the eager call
raises::

    gvr::topk_decode(Tensor logits, Tensor kv_lens, Tensor(a!) out, Tensor(b!)? values=None,
                     int next_n=1, int compress_ratio=1, int? max_seq_len=None,
                     Tensor? workspace=None, bool deterministic=False, bool sorted=False,
                     Tensor? block_max=None) -> ()
    gvr::topk_prefill(Tensor logits, Tensor row_starts, Tensor row_ends, Tensor(a!) out,
                      Tensor(b!)? values=None, Tensor? workspace=None,
                      bool deterministic=False, bool sorted=False,
                      Tensor? block_max=None) -> ()

``workspace`` is read and written by split launches, which leave every word they touch as they
found it (zero), so it is not declared mutated: a traced graph must not clone it.

The wrappers :func:`topk_decode` and :func:`topk_prefill` take the arguments of
:func:`gvr_dispatch.topk_decode` / :func:`gvr_dispatch.topk_prefill`. In eager mode they call
:mod:`gvr_dispatch` directly, which skips the dispatcher boundary of the op (argument boxing
and schema handling, a few microseconds per call); while ``torch.compile`` traces
(``torch.compiler.is_compiling()``) they allocate the missing output buffers and call the op.
Both paths compute the same answer.
"""

from __future__ import annotations

import logging

import gvr_dispatch
import torch
from gvr_dispatch.validation import (
    KERNEL_MAX_K,
    MAX_COMPRESS_RATIO,
    check_not_grad,
    half_values_message,
    resolve_k,
)

__all__ = ["topk_decode", "topk_prefill", "DECODE_SCHEMA", "PREFILL_SCHEMA"]

logger = logging.getLogger("gvr.integration")

DECODE_SCHEMA = (
    "(Tensor logits, Tensor kv_lens, Tensor(a!) out, Tensor(b!)? values=None, int next_n=1, "
    "int compress_ratio=1, int? max_seq_len=None, Tensor? workspace=None, "
    "bool deterministic=False, bool sorted=False, Tensor? block_max=None) -> ()"
)
PREFILL_SCHEMA = (
    "(Tensor logits, Tensor row_starts, Tensor row_ends, Tensor(a!) out, "
    "Tensor(b!)? values=None, Tensor? workspace=None, bool deterministic=False, "
    "bool sorted=False, Tensor? block_max=None) -> ()"
)
_DEVICES = ("cpu", "cuda")


# ---------------------------------------------------------------------------- the ops
@torch.library.custom_op(
    "gvr::topk_decode", mutates_args=("out", "values"), device_types=_DEVICES, schema=DECODE_SCHEMA
)
def _topk_decode_op(
    logits,
    kv_lens,
    out,
    values=None,
    next_n=1,
    compress_ratio=1,
    max_seq_len=None,
    workspace=None,
    deterministic=False,
    sorted=False,
    block_max=None,
):
    gvr_dispatch.topk_decode(
        logits,
        kv_lens,
        out=out,
        values=values,
        next_n=next_n,
        compress_ratio=compress_ratio,
        max_seq_len=max_seq_len,
        workspace=workspace,
        deterministic=deterministic,
        sorted=sorted,
        block_max=block_max,
    )


@torch.library.custom_op(
    "gvr::topk_prefill",
    mutates_args=("out", "values"),
    device_types=_DEVICES,
    schema=PREFILL_SCHEMA,
)
def _topk_prefill_op(
    logits,
    row_starts,
    row_ends,
    out,
    values=None,
    workspace=None,
    deterministic=False,
    sorted=False,
    block_max=None,
):
    gvr_dispatch.topk_prefill(
        logits,
        row_starts,
        row_ends,
        out=out,
        values=values,
        workspace=workspace,
        deterministic=deterministic,
        sorted=sorted,
        block_max=block_max,
    )


# ---------------------------------------------------------------------------- fake impls
# The fake implementations raise what the eager calls raise (``gvr_dispatch.validation``): a
# ``TypeError`` for a wrong dtype, a ``ValueError`` for a wrong shape, layout or value, each
# naming the argument. ``torch._check_type`` / ``torch._check_value`` take symbolic conditions
# too (shapes under dynamic tracing).
def _fake_block_max(logits, block_max) -> None:
    """The block maxima's metadata (``gvr_dispatch.blockmax.check_block_max``'s shape and
    dtype rules), for both fake implementations."""
    if block_max is None:
        return
    rows, width = logits.shape
    blocks = (width + 31) // 32
    torch._check_type(
        block_max.dtype == torch.float32, lambda: f"block_max must be float32: {block_max.dtype}"
    )
    torch._check_value(
        block_max.dim() == 2, lambda: f"block_max must be 2-D, got {block_max.dim()}-D"
    )
    torch._check_value(
        block_max.shape[0] == rows and block_max.shape[1] == blocks,
        lambda: f"block_max must be [rows, ceil(width / 32)] = [{rows}, {blocks}]",
    )
    torch._check_value(
        block_max.stride(1) == 1,
        lambda: f"block_max must have a unit inner stride, got strides {block_max.stride()}",
    )


def _fake_outputs(logits, out, values) -> None:
    """Metadata checks shared by both fake implementations (shapes may be symbolic)."""
    torch._check_type(
        logits.dtype in (torch.float32, torch.bfloat16, torch.float16),
        lambda: f"logits must be float32, bfloat16 or float16, got {logits.dtype}",
    )
    torch._check_value(logits.dim() == 2, lambda: f"logits must be 2-D, got {logits.dim()}-D")
    rows = logits.shape[0]
    torch._check_type(out.dtype == torch.int32, lambda: f"out must be int32, got {out.dtype}")
    torch._check_value(out.dim() == 2, lambda: f"out must be 2-D [rows, k], got {out.dim()}-D")
    torch._check_value(
        out.shape[0] == rows, lambda: f"out must have {rows} rows, got {out.shape[0]}"
    )
    k = out.shape[1]
    torch._check_value(k >= 1, lambda: f"k must be >= 1, got out.shape[1] = {k}")
    if out.device.type == "cuda":
        torch._check_value(
            k <= KERNEL_MAX_K,
            lambda: f"k must be <= {KERNEL_MAX_K} for CUDA tensors, got out.shape[1] = {k}",
        )
    torch._check_value(
        out.is_contiguous(), lambda: f"out must be contiguous, got strides {out.stride()}"
    )
    if values is not None:
        torch._check_type(
            values.dtype in (torch.float32, logits.dtype),
            lambda: (
                f"values must be torch.float32, got {values.dtype}"
                if logits.dtype == torch.float32
                else half_values_message(logits.dtype, values.dtype)
            ),
        )
        torch._check_value(
            values.shape == out.shape,
            lambda: f"values must have the shape of out {tuple(out.shape)}",
        )
        torch._check_value(
            values.is_contiguous(),
            lambda: f"values must be contiguous, got strides {values.stride()}",
        )


def _fake_index(t, name: str, numel) -> None:
    """A per-row or per-request int32 input (``kv_lens``, ``row_starts``, ``row_ends``) of
    ``numel`` entries (any when None)."""
    torch._check_type(t.dtype == torch.int32, lambda: f"{name} must be int32, got {t.dtype}")
    torch._check_value(t.dim() == 1, lambda: f"{name} must be 1-D, got {t.dim()}-D")
    if numel is not None:
        torch._check_value(
            t.shape[0] == numel, lambda: f"{name} must have {numel} entries, got {t.shape[0]}"
        )
    torch._check_value(
        t.shape[0] <= 1 or t.stride(0) == 1,
        lambda: f"{name} must be contiguous, got stride {t.stride(0)}",
    )


@_topk_decode_op.register_fake
def _topk_decode_fake(
    logits,
    kv_lens,
    out,
    values=None,
    next_n=1,
    compress_ratio=1,
    max_seq_len=None,
    workspace=None,
    deterministic=False,
    sorted=False,
    block_max=None,
):
    _fake_outputs(logits, out, values)
    _fake_block_max(logits, block_max)
    torch._check_value(next_n >= 1, lambda: f"next_n must be >= 1, got {next_n}")
    torch._check_value(
        1 <= compress_ratio <= MAX_COMPRESS_RATIO and compress_ratio & (compress_ratio - 1) == 0,
        lambda: (
            f"compress_ratio must be a power of two in [1, {MAX_COMPRESS_RATIO}], "
            f"got {compress_ratio}"
        ),
    )
    if max_seq_len is not None:
        torch._check_value(max_seq_len >= 0, lambda: f"max_seq_len must be >= 0, got {max_seq_len}")
    _fake_index(kv_lens, "kv_lens", None)
    torch._check_value(
        kv_lens.shape[0] * next_n == logits.shape[0],
        lambda: (
            f"kv_lens.numel() * next_n must equal logits.shape[0]: {kv_lens.shape[0]} * "
            f"{next_n} != {logits.shape[0]}"
        ),
    )


@_topk_prefill_op.register_fake
def _topk_prefill_fake(
    logits,
    row_starts,
    row_ends,
    out,
    values=None,
    workspace=None,
    deterministic=False,
    sorted=False,
    block_max=None,
):
    _fake_outputs(logits, out, values)
    _fake_block_max(logits, block_max)
    _fake_index(row_starts, "row_starts", logits.shape[0])
    _fake_index(row_ends, "row_ends", logits.shape[0])


# ---------------------------------------------------------------------------- wrappers
def _workspace_tensor(workspace):
    """The op takes a tensor; a :class:`gvr_dispatch.Workspace` is unwrapped."""
    if isinstance(workspace, gvr_dispatch.Workspace):
        return workspace.tensor
    return workspace


def _traced_buffers(logits, k, out, values, return_values):
    """Allocate the outputs a traced call needs (the op only fills buffers), after the one
    check the op cannot make: its implementations run below autograd, so a ``values`` buffer
    that requires grad is refused here, in the traced Python, as the eager call refuses it
    (:func:`gvr_dispatch.validation.check_output`)."""
    if isinstance(values, torch.Tensor):
        check_not_grad(values, "values")
    if k is None:
        k = resolve_k(None, out, values)
    rows = logits.shape[0]
    if out is None:
        out = torch.empty((rows, k), dtype=torch.int32, device=logits.device)
    if values is None and return_values:
        values = torch.empty((rows, k), dtype=logits.dtype, device=logits.device)
    return out, values


def topk_decode(
    logits,
    kv_lens,
    k=None,
    *,
    next_n=1,
    compress_ratio=1,
    out=None,
    values=None,
    return_values=False,
    max_seq_len=None,
    workspace=None,
    deterministic=False,
    sorted=False,
    block_max=None,
):
    """Decode top-K: :func:`gvr_dispatch.topk_decode` eagerly, ``gvr::topk_decode`` when traced.

    Row ``r`` of request ``r // next_n`` selects from its first
    ``max(0, (kv_lens[r // next_n] - next_n + r % next_n + 1) // compress_ratio)`` scores,
    clamped to the width.

    Args:
        logits: float32, bfloat16 or float16 ``[batch * next_n, width]`` on CPU or CUDA
            (width in compressed KV positions).
        kv_lens: int32 ``[batch]``, contiguous: total KV length per request in *uncompressed*
            tokens.
        k: top-K size; may be left out when ``out`` or ``values`` gives it.
        next_n: rows per request (MTP draft tokens + 1), ``>= 1``.
        compress_ratio: KV compression ratio, a power of two.
        out: optional int32 ``[rows, k]`` contiguous buffer for the indices (filled in place).
        values: optional ``[rows, k]`` contiguous buffer for the values: float32, or the
            logits dtype.
        return_values: also return values without a ``values`` buffer.
        max_seq_len: optional upper bound on ``kv_lens`` in uncompressed tokens that tightens
            the launch envelope below the logits width (no call reads device data).
        workspace: optional split workspace (a :class:`gvr_dispatch.Workspace` or a zeroed CUDA
            tensor); ignored on the CPU.
        deterministic: ties at the K-th value go to the smallest indices.
        sorted: descending values, ties by ascending index, ``-1`` last.
        block_max: optional float32 ``[rows, ceil(width / 32)]`` block bounds from the
            scores' producer (``gvr_integration.indexer.block_maxima``): large launches then
            read only the blocks that can hold a winner (see
            :func:`gvr_dispatch.topk_decode`).

    Returns:
        ``out`` (int32 ``[rows, k]``, local indices, ``-1`` padded), or ``(out, values)``
        when ``values`` is given or ``return_values`` is set (``-FLT_MAX`` beside ``-1``).

    Raises:
        TypeError, ValueError: bad arguments (from :mod:`gvr_dispatch`; nothing is written).
        RuntimeError: under CUDA-graph capture, what capture forbids (see ``docs/api.md``).
    """
    if not torch.compiler.is_compiling():
        return gvr_dispatch.topk_decode(
            logits,
            kv_lens,
            k,
            next_n=next_n,
            compress_ratio=compress_ratio,
            out=out,
            values=values,
            return_values=return_values,
            max_seq_len=max_seq_len,
            workspace=workspace,
            deterministic=deterministic,
            sorted=sorted,
            block_max=block_max,
        )
    out, values = _traced_buffers(logits, k, out, values, return_values)
    torch.ops.gvr.topk_decode(
        logits,
        kv_lens,
        out,
        values,
        next_n,
        compress_ratio,
        max_seq_len,
        _workspace_tensor(workspace),
        deterministic,
        sorted,
        block_max,
    )
    return out if values is None else (out, values)


def topk_prefill(
    logits,
    row_starts,
    row_ends,
    k=None,
    *,
    out=None,
    values=None,
    return_values=False,
    workspace=None,
    deterministic=False,
    sorted=False,
    block_max=None,
):
    """Prefill top-K over windows: :func:`gvr_dispatch.topk_prefill` eagerly,
    ``gvr::topk_prefill`` when traced.

    Args:
        logits: float32, bfloat16 or float16 ``[rows, width]`` on CPU or CUDA.
        row_starts, row_ends: int32 ``[rows]``, contiguous: row ``r`` selects from columns
            ``[row_starts[r], row_ends[r])`` (clamped to ``[0, width]``).
        k, out, values, return_values, workspace, deterministic, sorted, block_max: as in
            :func:`topk_decode`.

    Returns:
        ``out`` (int32 ``[rows, k]``, window-local: column ``- clamp(row_starts[r], 0,
        width)``), or
        ``(out, values)``.

    Raises:
        TypeError, ValueError: bad arguments (nothing is written).
        RuntimeError: under CUDA-graph capture, what capture forbids.
    """
    if not torch.compiler.is_compiling():
        return gvr_dispatch.topk_prefill(
            logits,
            row_starts,
            row_ends,
            k,
            out=out,
            values=values,
            return_values=return_values,
            workspace=workspace,
            deterministic=deterministic,
            sorted=sorted,
            block_max=block_max,
        )
    out, values = _traced_buffers(logits, k, out, values, return_values)
    torch.ops.gvr.topk_prefill(
        logits,
        row_starts,
        row_ends,
        out,
        values,
        _workspace_tensor(workspace),
        deterministic,
        sorted,
        block_max,
    )
    return out if values is None else (out, values)
