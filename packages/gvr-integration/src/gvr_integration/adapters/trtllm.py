"""TensorRT-LLM call shapes served by GVR: ``indexer_topk_decode``, ``indexer_topk_prefill``
and the reusable ``TopK`` module.

These are drop-in stand-ins for TensorRT-LLM's DSA indexer top-K entry points: same argument
names and order, same checks, same output conventions, with the selection done by
:mod:`gvr_integration.ops` (GVR kernels on CUDA, the CPU engine on CPU tensors).

Peer conventions followed here:

- ``seq_lens`` / ``sequence_lengths`` are the *total* KV lengths per request in uncompressed
  tokens; decode row ``r`` sees ``kv - next_n + r % next_n + 1`` tokens, ``// compress_ratio``.
- ``indices`` may be wider than ``index_topk``: like the peer, the answer is then written
  flat-packed into the first ``rows * index_topk`` elements
  (:func:`~gvr_integration.adapters._common.packed_rows`).
- Output indices are local: decode column, prefill ``column - row_starts[r]``; short rows give
  ``0 .. n-1`` then ``-1``; order unspecified.
- ``TopK.forward``'s ``max_seq_len`` is in *compressed* units (the module multiplies it by
  ``compress_ratio``, as the peer does before calling its engine).

Differences from the peer, all on the safe side: rows are clamped to the logits width (the peer
reads past it if ``seq_lens`` says so); CPU tensors are served too; K is limited to 2048 on
CUDA (any K on the CPU).
"""

from __future__ import annotations

import enum
import logging

import torch
from gvr_dispatch.validation import check_compress_ratio

from .. import ops
from ._common import check_int, check_tensor, envelope_tokens, packed_rows

__all__ = ["indexer_topk_decode", "indexer_topk_prefill", "TopK", "TopKImplementation"]

logger = logging.getLogger("gvr.integration.trtllm")


def indexer_topk_decode(
    logits,
    seq_lens,
    indices,
    next_n,
    index_topk=2048,
    *,
    compress_ratio=1,
    pre_idx=None,
    heuristic_scratch=None,
    radix_aux_indices=None,
    radix_aux_logits=None,
    max_seq_len=None,
    block_max=None,
):
    """Decode top-K in TensorRT-LLM's ``indexer_topk_decode`` call shape; fills ``indices``.

    Args:
        logits: float32 ``[rows, width]``, ``rows = batch * next_n``, any row stride (width in
            compressed KV positions).
        seq_lens: int32 ``[batch]``, contiguous: total KV length per request, *uncompressed*
            tokens (``kv_lens``, not the step's new tokens).
        indices: int32 contiguous ``[rows, >= index_topk]``; written flat-packed when wider
            (see the module docstring). Elements past ``rows * index_topk`` are not touched.
        next_n: rows per request, ``> 0``.
        index_topk: K.
        compress_ratio: 1 or another power of two (keyword, as newer peer callers pass it).
        pre_idx, heuristic_scratch, radix_aux_indices, radix_aux_logits: accepted and ignored
            (temporal hints and split-work scratch of the peer's engines; GVR needs neither).
        max_seq_len: GVR extension: an upper bound on ``seq_lens`` in uncompressed tokens that
            sizes the launch. Default ``width * compress_ratio``, so no host read happens and
            the call is capture-safe.
        block_max: GVR extension: float32 ``[rows, ceil(width / 32)]`` block maxima written
            by the scores' producer (``gvr_integration.indexer.block_maxima``); large launches
            then skip blocks that cannot hold a winner (:func:`gvr_dispatch.topk_decode`).

    Returns:
        None (the answer is in ``indices``).

    Raises:
        TypeError: a wrong type or dtype.
        ValueError: what the peer checks (ranks, devices, ``seq_lens.size(0) * next_n ==
            logits.size(0)``, ``indices.size(0) == logits.size(0)``, ``indices.size(1) >=
            index_topk``, contiguity, ``next_n > 0``), and K > 2048 on CUDA.
    """
    del pre_idx, heuristic_scratch, radix_aux_indices, radix_aux_logits
    check_tensor(logits, "logits", dim=2)
    device = logits.device
    check_tensor(seq_lens, "seq_lens", dim=1, dtype=torch.int32, device=device, contiguous=True)
    check_tensor(indices, "indices", dim=2, device=device, contiguous=True)
    next_n = check_int(next_n, "next_n", minimum=1)
    k = check_int(index_topk, "index_topk", minimum=1)
    rows, width = logits.shape
    if seq_lens.shape[0] * next_n != rows:
        raise ValueError(
            f"seq_lens length multiplied by next_n must equal logits.size(0): "
            f"{seq_lens.shape[0]} * {next_n} != {rows}"
        )
    if indices.shape[0] != rows:
        raise ValueError(
            f"indices.size(0) must equal logits.size(0) = {rows}, got {indices.shape[0]}"
        )
    if indices.shape[1] < k:
        raise ValueError(f"indices.size(1) must be >= index_topk = {k}, got {indices.shape[1]}")
    out = packed_rows(indices, rows, k, "indices", device)
    if max_seq_len is None:
        max_seq_len = envelope_tokens(width, compress_ratio)
    ops.topk_decode(
        logits,
        seq_lens,
        k,
        next_n=next_n,
        compress_ratio=compress_ratio,
        out=out,
        max_seq_len=max_seq_len,
        block_max=block_max,
    )


def indexer_topk_prefill(logits, row_starts, row_ends, indices, index_topk=2048, *, block_max=None):
    """Prefill top-K in TensorRT-LLM's ``indexer_topk_prefill`` call shape; fills ``indices``.

    Row ``r`` selects the top-K of ``logits[r, row_starts[r]:row_ends[r]]`` and reports
    window-local indices (``column - row_starts[r]``), ``-1`` past a short window.

    Args:
        logits: float32 ``[rows, width]``, any row stride.
        row_starts, row_ends: int32 ``[rows]``, contiguous, in logits columns (windows are
            clamped to ``[0, width]``).
        indices: int32 contiguous, at least ``rows * index_topk`` elements; row ``r`` is written
            at flat offset ``r * index_topk`` (the peer's addressing).
        index_topk: K.
        block_max: GVR extension, as in :func:`indexer_topk_decode`.

    Returns:
        None (the answer is in ``indices``).

    Raises:
        TypeError: a wrong type or dtype.
        ValueError: ranks, devices, entry counts, contiguity, a too-small ``indices``, and
            K > 2048 on CUDA.
    """
    check_tensor(logits, "logits", dim=2)
    device = logits.device
    rows = logits.shape[0]
    for name, t in (("row_starts", row_starts), ("row_ends", row_ends)):
        check_tensor(t, name, dim=1, device=device, contiguous=True)
        if t.shape[0] != rows:
            raise ValueError(
                f"{name} must have one entry per row in logits ({rows}), got {t.shape[0]}"
            )
    check_tensor(indices, "indices", dim=2)
    k = check_int(index_topk, "index_topk", minimum=1)
    out = packed_rows(indices, rows, k, "indices", device)
    ops.topk_prefill(logits, row_starts, row_ends, k, out=out, block_max=block_max)


class TopKImplementation(enum.Enum):
    """The peer's implementation selector. Every member is accepted and served by GVR: they
    all compute the exact top-K, so the choice does not change the answer."""

    TORCH = "torch"
    CUDA_RADIX = "cuda_radix"
    CUTE_DSL_RADIX = "cute_dsl_radix"
    CUTE_DSL_GVR = "cute_dsl_gvr"


class TopK(torch.nn.Module):
    """TensorRT-LLM's reusable index-selection ``TopK`` module, served by GVR.

    Args:
        top_k: K.
        prefill_implementation, decode_implementation: accepted and ignored (``None``, a
            :class:`TopKImplementation` or its name); GVR serves every call.
        compress_ratio: KV compression ratio of the decode scores (power of two).
        gvr_self_sampling: accepted; ``False`` (the peer's temporal engine, which wants prior
            top-K hints) is served by the same hint-free GVR selection.
        use_gvr_locality_domain: accepted and ignored.

    Raises:
        TypeError, ValueError: a bad ``top_k`` or ``compress_ratio``.
    """

    def __init__(
        self,
        top_k,
        *,
        prefill_implementation=None,
        decode_implementation=None,
        compress_ratio=1,
        gvr_self_sampling=True,
        use_gvr_locality_domain=False,
    ):
        super().__init__()
        self.top_k = check_int(top_k, "top_k", minimum=1)
        cr = check_int(compress_ratio, "compress_ratio", minimum=1)
        check_compress_ratio(cr)  # a power of two in range, as every call checks it
        self.compress_ratio = cr
        self.prefill_implementation = prefill_implementation
        self.decode_implementation = decode_implementation
        self.gvr_self_sampling = bool(gvr_self_sampling)
        self.use_gvr_locality_domain = bool(use_gvr_locality_domain)
        if prefill_implementation is not None or decode_implementation is not None:
            logger.debug(
                "TopK: implementations %s / %s requested; GVR serves both",
                prefill_implementation,
                decode_implementation,
            )

    @property
    def needs_gvr_prior(self) -> bool:
        """Always False: GVR needs no previous-step top-K hints."""
        return False

    def extra_repr(self) -> str:
        return f"top_k={self.top_k}, compress_ratio={self.compress_ratio}, engine=gvr"

    def forward(
        self,
        scores,
        output_indices,
        *,
        is_prefill,
        row_starts=None,
        row_ends=None,
        sequence_lengths=None,
        scan_lengths=None,
        next_n=1,
        max_seq_len=None,
        gvr_ext_kwargs=None,
        block_max=None,
    ):
        """Select the top-K of every row of ``scores`` into ``output_indices``.

        Args:
            scores: float32 ``[rows, width]``, any row stride.
            output_indices: int32 contiguous ``[rows, >= top_k]``; written flat-packed when
                wider (the peer's engine addressing).
            is_prefill: prefill (row windows) or decode (per-request lengths).
            row_starts, row_ends: prefill only, required: int32 ``[rows]`` windows in score
                columns; indices are window-local.
            sequence_lengths: decode: int32 ``[rows // next_n]``, total KV length per request
                in uncompressed tokens.
            scan_lengths: decode: per-request score-column lengths. Used only when
                ``sequence_lengths`` is None and ``compress_ratio == 1`` (the units then
                agree); otherwise ignored.
            next_n: decode rows per request.
            max_seq_len: decode envelope in *compressed* units (multiplied by
                ``compress_ratio`` here, as the peer does); default: the scores width.
            gvr_ext_kwargs: accepted and ignored (``gvr_prior_indices``, ``gvr_row_order``).
            block_max: GVR extension, as in :func:`indexer_topk_decode`: float32
                ``[rows, ceil(width / 32)]`` block maxima of ``scores`` from their producer.

        Returns:
            ``output_indices``.

        Raises:
            TypeError, ValueError: missing windows or lengths, bad shapes or dtypes.
        """
        del gvr_ext_kwargs
        check_tensor(scores, "scores", dim=2)
        rows, width = scores.shape
        device = scores.device
        check_tensor(output_indices, "output_indices", dim=2)
        if output_indices.shape[0] != rows:
            raise ValueError(
                f"output_indices must have {rows} rows, got {tuple(output_indices.shape)}"
            )
        out = packed_rows(output_indices, rows, self.top_k, "output_indices", device)
        if is_prefill:
            if row_starts is None or row_ends is None:
                raise ValueError("prefill needs row_starts and row_ends")
            ops.topk_prefill(scores, row_starts, row_ends, self.top_k, out=out, block_max=block_max)
            return output_indices
        lengths = sequence_lengths
        if lengths is None:
            if scan_lengths is None or self.compress_ratio != 1:
                raise ValueError(
                    "decode needs sequence_lengths (uncompressed tokens); scan_lengths stands "
                    "in for them only when compress_ratio == 1"
                )
            lengths = scan_lengths
        name = "sequence_lengths" if sequence_lengths is not None else "scan_lengths"
        check_tensor(lengths, name, dim=1, dtype=torch.int32, device=scores.device)
        cr = self.compress_ratio
        if max_seq_len is None:
            tokens = envelope_tokens(width, cr)
        else:
            tokens = check_int(max_seq_len, "max_seq_len", minimum=0) * cr
        ops.topk_decode(
            scores,
            lengths,
            self.top_k,
            next_n=next_n,
            compress_ratio=cr,
            out=out,
            max_seq_len=tokens,
            block_max=block_max,
        )
        return output_indices
