"""The DSA decode pipeline on real input: lightning indexer -> GVR top-K -> sparse attention.

Input is the committed real sample of ``gvr_reference.realdata`` (Gemma-3-270M layer 5 over
the King James Bible: keys and values of 4096 positions, the queries of the last 64, head
weights), upcast to float32 and moved to the chosen device. In this sample the indexer and
the attention share the layer's own queries and keys (DSA has a separate, smaller indexer
projection); with ``compress_ratio = 4`` both read the mean-pooled caches
(``k_compressed`` / ``v_compressed``), as DeepSeek-V4's compressed attention does.

A decode step serves a batch of requests. Request ``j`` holds ``next_n`` consecutive query
positions ``p .. p + next_n - 1`` (multi-token prediction) and ``kv_len = p + next_n`` cached
tokens; its row ``i`` sees ``kv_len - next_n + i + 1`` tokens, ``// compress_ratio`` pooled
keys. Every step:

1. scores every cached key with the lightning indexer (``-inf`` past each row's length),
2. selects the top-K of every row with GVR (:func:`gvr_integration.ops.topk_decode`, or any
   selector with its call shape, e.g. a replayed CUDA graph),
3. checks the selection with the oracle's validator (``gvr_reference.validate``),
4. attends over the selected positions and over ``torch.topk``'s selection and compares.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from gvr_reference import validate
from gvr_reference.realdata import RealSample

from . import ops
from .attention import sparse_attention, torch_topk_selection
from .indexer import decode_row_lengths, lightning_indexer

__all__ = ["DecodeConfig", "StepInputs", "StepResult", "DSADecodePipeline", "decode_schedule"]

logger = logging.getLogger("gvr.integration.pipeline")

Selector = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class DecodeConfig:
    """One decode configuration.

    Attributes:
        k: top-K size.
        next_n: rows per request (MTP draft tokens + 1).
        compress_ratio: 1 (token keys) or the sample's ratio (pooled keys).
        weights: the sample's head weights, ``"positive"`` or ``"signed"``.
        batch: requests per step.
    """

    k: int
    next_n: int = 1
    compress_ratio: int = 1
    weights: str = "positive"
    batch: int = 1

    @property
    def rows(self) -> int:
        """Logits rows per step, ``batch * next_n``."""
        return self.batch * self.next_n

    def label(self) -> str:
        return (
            f"K={self.k} next_n={self.next_n} cr={self.compress_ratio} "
            f"w={self.weights} batch={self.batch}"
        )


@dataclass
class StepInputs:
    """The tensors of one decode step (on the pipeline's device).

    Attributes:
        positions: int64 ``[rows]`` query positions (numpy).
        q: float32 ``[rows, H, d]`` queries.
        weights: float32 ``[rows, H]`` indexer head weights.
        kv_lens: int32 ``[batch]`` total KV length per request, uncompressed tokens.
        lengths: int64 ``[rows]`` valid (compressed) columns per row.
    """

    positions: np.ndarray
    q: torch.Tensor
    weights: torch.Tensor
    kv_lens: torch.Tensor
    lengths: torch.Tensor


@dataclass
class StepResult:
    """What one step produced and how it compares.

    Attributes:
        rows: logits rows.
        min_len, max_len: shortest and longest row (compressed columns).
        exact: the GVR selection passed the validator.
        summary: the validator's summary.
        attn_max_abs_diff: max ``|o_gvr - o_torch|`` over rows whose selected sets agree.
        rows_same_set: rows where GVR and ``torch.topk`` selected the same set.
        tie_rows: rows whose sets differ although both are exact (a different member of the
            K-th value's tie class); their attention outputs may differ legitimately.
        tie_attn_max_abs_diff: max ``|o_gvr - o_torch|`` over ``tie_rows`` (0 if none).
    """

    rows: int
    min_len: int
    max_len: int
    exact: bool
    summary: str
    attn_max_abs_diff: float
    rows_same_set: int
    tie_rows: int
    tie_attn_max_abs_diff: float


def decode_schedule(
    n_queries: int, next_n: int, batch: int, steps: int | None = None
) -> list[np.ndarray]:
    """Which query groups each step serves.

    The ``n_queries`` stored positions form ``G = n_queries // next_n`` groups of ``next_n``.
    Request ``j`` starts at group ``j * G // batch`` and advances one group per step, wrapping
    from the last group to the first (the slot then holds a new, shorter request), so every
    request's KV length grows by ``next_n`` per step. The default ``G // batch`` steps visit
    every group once (exactly once when ``batch`` divides ``G``); ``G`` steps visit every group
    ``batch`` times.

    Args:
        n_queries: stored query positions.
        next_n: rows per request.
        batch: requests per step, ``1 <= batch <= G``.
        steps: number of steps (default ``G // batch``).

    Returns:
        ``steps`` int arrays of ``batch`` group indices.

    Raises:
        ValueError: ``batch`` outside ``[1, G]`` or ``steps < 1``.
    """
    groups = n_queries // next_n
    if not 1 <= batch <= groups:
        raise ValueError(f"batch must be in [1, {groups}], got {batch}")
    steps = groups // batch if steps is None else steps
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    start = np.arange(batch) * groups // batch
    return [(start + t) % groups for t in range(steps)]


class DSADecodePipeline:
    """Indexer -> top-K -> sparse attention for one :class:`DecodeConfig` on a real sample.

    Args:
        sample: from ``gvr_reference.realdata.load_sample()``.
        config: the decode configuration.
        device: where the tensors live (``"cpu"`` runs the CPU engine, ``"cuda"`` the kernels).

    Raises:
        ValueError: a compress ratio the sample does not store, unknown weights, or a K larger
            than the cache width.
    """

    def __init__(self, sample: RealSample, config: DecodeConfig, device="cpu"):
        self.sample = sample
        self.config = config
        self.device = torch.device(device)
        cr = config.compress_ratio
        if cr == 1:
            keys, vals = sample.k, sample.v
        elif cr == sample.compress_ratio:
            keys, vals = sample.k_compressed, sample.v_compressed
        else:
            raise ValueError(f"compress_ratio must be 1 or {sample.compress_ratio}, got {cr}")
        if config.weights not in sample.weights:
            raise ValueError(f"weights must be one of {sorted(sample.weights)}")

        def dev(a):
            return torch.from_numpy(np.array(a, dtype=np.float32)).to(self.device)

        self.keys = dev(keys)
        self.values = dev(vals)
        self.q = dev(sample.q)
        self.head_weights = dev(sample.weights[config.weights])
        self.width = int(self.keys.shape[0])
        self.max_seq_len = sample.n_tokens
        if config.k > self.width:
            raise ValueError(f"K={config.k} exceeds the cache width {self.width}")

    # ------------------------------------------------------------------ the pieces
    def inputs(self, groups: Sequence[int]) -> StepInputs:
        """The step's queries, head weights and lengths for the given query groups."""
        n = self.config.next_n
        groups = np.asarray(groups, dtype=np.int64)
        index = (groups[:, None] * n + np.arange(n)[None, :]).reshape(-1)
        positions = self.sample.positions[index]
        kv = torch.from_numpy((positions[n - 1 :: n] + 1).astype(np.int32)).to(self.device)
        lengths = decode_row_lengths(kv, n, self.config.compress_ratio, self.width)
        sel = torch.from_numpy(index).to(self.device)
        return StepInputs(positions, self.q[sel], self.head_weights[sel], kv, lengths)

    def scores(
        self,
        inp: StepInputs,
        out: torch.Tensor | None = None,
        block_max: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Lightning-indexer scores ``[rows, width]``, ``-inf`` past each row's length;
        with ``block_max`` (float32 ``[rows, ceil(width / 32)]``) also the maximum of every
        block of 32 columns (``gvr_integration.indexer.block_maxima``)."""
        return lightning_indexer(
            inp.q, inp.weights, self.keys, inp.lengths, out=out, block_max=block_max
        )

    def select(
        self,
        logits: torch.Tensor,
        kv_lens: torch.Tensor,
        block_max: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """GVR top-K of the step (eager :func:`gvr_integration.ops.topk_decode`), reading the
        indexer's block maxima when given."""
        c = self.config
        return ops.topk_decode(
            logits,
            kv_lens,
            c.k,
            next_n=c.next_n,
            compress_ratio=c.compress_ratio,
            max_seq_len=self.max_seq_len,
            block_max=block_max,
        )

    def check(
        self, logits: torch.Tensor, kv_lens: torch.Tensor, indices: torch.Tensor
    ) -> validate.ValidationReport:
        """The oracle's verdict on a selection."""
        c = self.config
        return validate.check_decode(
            logits.detach().cpu().numpy(),
            kv_lens.cpu().numpy(),
            c.k,
            indices.cpu().numpy(),
            next_n=c.next_n,
            compress_ratio=c.compress_ratio,
        )

    def attend(self, inp: StepInputs, indices: torch.Tensor) -> torch.Tensor:
        """Sparse attention ``[rows, H, d]`` over the selected positions."""
        return sparse_attention(inp.q, self.keys, self.values, indices)

    # ------------------------------------------------------------------ one step
    def step(
        self, groups: Sequence[int], select: Selector | None = None, block_skip: bool = False
    ) -> StepResult:
        """Run one decode step end to end and compare it (see the module docstring).

        Args:
            groups: the query groups of the step's requests (:func:`decode_schedule`).
            select: the top-K call, ``select(logits, kv_lens) -> int32 [rows, K]``; default
                :meth:`select`.
            block_skip: the indexer also writes block maxima and the default selection
                reads them (block-skip); ignored with ``select``.
        """
        inp = self.inputs(groups)
        if block_skip and select is None:
            rows = inp.kv_lens.shape[0] * self.config.next_n
            bm = torch.empty((rows, -(-self.width // 32)), dtype=torch.float32,
                             device=inp.q.device)  # fmt: skip
            logits = self.scores(inp, block_max=bm)
            idx = self.select(logits, inp.kv_lens, block_max=bm)
        else:
            logits = self.scores(inp)
            idx = (select or self.select)(logits, inp.kv_lens)
        report = self.check(logits, inp.kv_lens, idx)
        if not report.ok:
            logger.warning("%s: inexact selection\n%s", self.config.label(), report.summary())
        ref = torch_topk_selection(logits, inp.lengths, self.config.k)
        o_gvr = self.attend(inp, idx)
        o_ref = self.attend(inp, ref)
        diff = (o_gvr - o_ref).abs().flatten(1).amax(dim=1)
        same = (idx.sort(dim=1).values == ref.sort(dim=1).values).all(dim=1)
        tie = ~same
        if bool(tie.any()):
            # Both must be exact: then the sets differ only inside the K-th value's tie class.
            ref_report = self.check(logits, inp.kv_lens, ref)
            if not ref_report.ok:
                logger.warning("torch.topk selection failed the validator:\n%s", ref_report)
        lengths = inp.lengths
        return StepResult(
            rows=int(idx.shape[0]),
            min_len=int(lengths.min()),
            max_len=int(lengths.max()),
            exact=report.ok,
            summary=report.summary(),
            attn_max_abs_diff=float(diff[same].max()) if bool(same.any()) else 0.0,
            rows_same_set=int(same.sum()),
            tie_rows=int(tie.sum()),
            tie_attn_max_abs_diff=float(diff[tie].max()) if bool(tie.any()) else 0.0,
        )
