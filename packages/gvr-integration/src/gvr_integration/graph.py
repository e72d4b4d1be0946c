"""A decode top-K call captured into a CUDA graph, with static input and output buffers.

The recipe of ``docs/api.md``: warm up every kernel the envelope can route to
(``gvr_dispatch.warmup`` with ``max_seq_len``) on a side stream, run the call once eagerly,
capture it with fixed ``logits``/``kv_lens``/``out`` buffers, then per step write the new
inputs into those buffers in place and replay. Lengths may grow or shrink between replays
(up to ``max_seq_len``); the launch depends only on shapes and ``max_seq_len``.
"""

from __future__ import annotations

import logging

import gvr_dispatch
import torch

from . import ops

__all__ = ["CapturedDecodeTopK"]

logger = logging.getLogger("gvr.integration.graph")


class CapturedDecodeTopK:
    """``topk_decode`` over static buffers, captured once and replayed per step.

    Args:
        rows: logits rows (``batch * next_n``).
        width: logits width (compressed KV positions), at least ``max_seq_len //
            compress_ratio``.
        k: top-K size (``<= 2048``).
        next_n, compress_ratio: as in :func:`gvr_integration.ops.topk_decode`.
        max_seq_len: bound on ``kv_lens`` in uncompressed tokens (what the graph is built for).
        device: a CUDA device.
        with_values: also capture the values output.
        row_stride: logits row pitch in elements (``>= width``, a multiple of 4 for in-place
            reads, 8 for 16-bit logits); default ``width``. The buffer is then a column slice
            of a wider arena.
        dtype: the logits dtype: ``torch.float32``, ``torch.bfloat16`` or ``torch.float16``.

    Attributes:
        logits: ``dtype`` ``[rows, width]`` input buffer (write the step's scores here).
        kv_lens: int32 ``[rows // next_n]`` input buffer.
        out: int32 ``[rows, k]`` output buffer; ``values`` ``[rows, k]`` in ``dtype`` or None.
        graph: the ``torch.cuda.CUDAGraph``.

    Raises:
        RuntimeError: no CUDA device, or a capture failure.
    """

    def __init__(
        self,
        rows: int,
        width: int,
        k: int,
        *,
        next_n: int = 1,
        compress_ratio: int = 1,
        max_seq_len: int,
        device="cuda",
        with_values: bool = False,
        row_stride: int | None = None,
        dtype: torch.dtype = torch.float32,
    ):
        device = torch.device(device)
        if device.type != "cuda":
            raise RuntimeError(f"CUDA graphs need a CUDA device, got {device}")
        if not torch.cuda.is_available():
            raise RuntimeError(
                f"CUDA graphs need a CUDA device, got {device} and none is available "
                "(torch.cuda.is_available() is False)"
            )
        if rows % next_n:
            raise ValueError(f"rows ({rows}) must be a multiple of next_n ({next_n})")
        pitch = width if row_stride is None else row_stride
        arena = torch.full((rows, pitch), float("-inf"), dtype=dtype, device=device)
        self.logits = arena[:, :width]
        self.kv_lens = torch.zeros(rows // next_n, dtype=torch.int32, device=device)
        self.out = torch.full((rows, k), -1, dtype=torch.int32, device=device)
        self.values = torch.empty((rows, k), dtype=dtype, device=device) if with_values else None
        self.k, self.next_n, self.compress_ratio = k, next_n, compress_ratio
        self.max_seq_len = max_seq_len

        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            self.warmup_report = gvr_dispatch.warmup(
                k=k,
                max_seq_len=max_seq_len,
                rows=(rows,),
                next_n=next_n,
                compress_ratio=compress_ratio,
                row_stride=pitch,
                width=width,
                with_values=with_values,
                device=device,
                progress=False,
                dtype=dtype,
            )
            self._call()  # one eager call on the same buffers
        torch.cuda.current_stream(device).wait_stream(side)
        torch.cuda.synchronize(device)

        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self._call()
        logger.info(
            "captured topk_decode: rows=%d width=%d k=%d next_n=%d cr=%d max_seq_len=%d",
            rows,
            width,
            k,
            next_n,
            compress_ratio,
            max_seq_len,
        )

    def _call(self) -> None:
        ops.topk_decode(
            self.logits,
            self.kv_lens,
            out=self.out,
            values=self.values,
            next_n=self.next_n,
            compress_ratio=self.compress_ratio,
            max_seq_len=self.max_seq_len,
        )

    def __call__(
        self, logits: torch.Tensor | None = None, kv_lens: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Copy new inputs into the static buffers (when given), replay, return ``out``.

        The returned tensor is the static buffer itself: the next replay overwrites it.
        """
        if logits is not None:
            self.logits.copy_(logits)
        if kv_lens is not None:
            self.kv_lens.copy_(kv_lens)
        self.graph.replay()
        return self.out
