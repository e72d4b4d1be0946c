"""Pure tensor helpers of the generator: RoPE, position interpolation, pooling, 8/6-bit storage.

Everything here is a small deterministic function of its inputs (no model, no files), so the
tests can check it on tiny tensors. All functions take and return ``torch.Tensor``.

Sources of the formulas:

- Rotate-half RoPE (the non-interleaved layout of GPT-NeoX and Hugging Face ``transformers``):
  ``rope(x)[i] = x[i] cos(a_i) - x[i + d/2] sin(a_i)`` and
  ``rope(x)[i + d/2] = x[i + d/2] cos(a_i) + x[i] sin(a_i)`` for ``i < d/2``, with angle
  ``a_i = p * theta ** (-2 i / d)`` (Su et al., "RoFormer", arXiv:2104.09864, eq. 34; the layout
  is ``rotate_half``/``apply_rotary_pos_emb`` in ``transformers/models/gemma3/modeling_gemma3.py``).
- Linear position interpolation: a model trained on ``L`` positions run on ``N > L`` positions
  uses position ``p * L / N`` (Chen et al., "Extending Context Window of Large Language Models
  via Positional Interpolation", arXiv:2306.15595, eq. 4).
- Gemma RMS norm: ``x / sqrt(mean(x^2) + eps) * (1 + w)``, computed in fp32 (``Gemma3RMSNorm`` in
  the same ``transformers`` file).
"""

from __future__ import annotations

import torch

__all__ = [
    "rope_inv_freq",
    "interpolation_scale",
    "rope_cos_sin",
    "rotate_half",
    "apply_rope",
    "mean_pool",
    "gemma_rms_norm",
    "quantize_symmetric",
    "quantize_int8",
    "dequantize_int8",
    "pack_int6",
]


def rope_inv_freq(head_dim: int, theta: float) -> torch.Tensor:
    """Inverse frequencies of RoPE.

    Args:
        head_dim: the rotated dimension ``d`` (even).
        theta: the RoPE base (Gemma-3 global layers: ``1e6``; local layers: ``1e4``).

    Returns:
        float64 tensor ``[d // 2]`` with entry ``i`` equal to ``theta ** (-2 i / d)`` (radians per
        position).

    Raises:
        ValueError: ``head_dim`` is not a positive even number or ``theta <= 1``.
    """
    if head_dim <= 0 or head_dim % 2:
        raise ValueError(f"head_dim must be positive and even, got {head_dim}")
    if not theta > 1.0:
        raise ValueError(f"theta must be > 1, got {theta}")
    exponents = torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim
    return 1.0 / (float(theta) ** exponents)


def interpolation_scale(n_tokens: int, trained_positions: int) -> float:
    """The factor of linear position interpolation for a sequence of ``n_tokens``.

    Positions are multiplied by this factor before RoPE: ``1.0`` while the sequence fits the
    trained context (``n_tokens <= trained_positions``), else ``trained_positions / n_tokens``,
    which maps the last position ``n_tokens - 1`` just below ``trained_positions``
    (arXiv:2306.15595, eq. 4).

    Args:
        n_tokens: sequence length, BOS included (>= 1).
        trained_positions: the model's trained context (Gemma-3-270M: 32768).

    Returns:
        The scale, a Python float in ``(0, 1]``.

    Raises:
        ValueError: a non-positive argument.
    """
    if n_tokens <= 0 or trained_positions <= 0:
        raise ValueError(f"need positive lengths, got {n_tokens=} {trained_positions=}")
    if n_tokens <= trained_positions:
        return 1.0
    return trained_positions / n_tokens


def rope_cos_sin(
    positions: torch.Tensor, head_dim: int, theta: float, scale: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Cosine and sine tables of rotate-half RoPE at (interpolated) positions.

    The angles ``(p * scale) * inv_freq`` are formed and evaluated in float64 and rounded once to
    float32. (``transformers`` forms them in float32, which at position 1e5 is off by ~1e-2 rad
    in the fastest pair; float64 keeps long sequences exact to fp32 rounding.)

    Args:
        positions: integer or float tensor ``[P]`` of token positions.
        head_dim: rotated dimension ``d`` (even).
        theta: RoPE base.
        scale: linear interpolation factor from :func:`interpolation_scale`.

    Returns:
        ``(cos, sin)``, each float32 ``[P, d]``; column ``i`` and ``i + d/2`` hold the same angle.
    """
    inv_freq = rope_inv_freq(head_dim, theta)
    angles = positions.to(torch.float64)[:, None] * float(scale) * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(torch.float32), angles.sin().to(torch.float32)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``[x1, x2] -> [-x2, x1]`` over the last dimension split in two halves.

    Args:
        x: tensor ``[..., d]`` with even ``d``.

    Returns:
        Tensor of the same shape and dtype.
    """
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate vectors by rotate-half RoPE: ``x * cos + rotate_half(x) * sin``.

    Args:
        x: float tensor ``[P, d]`` or ``[P, H, d]`` (one row per position, optional heads).
        cos, sin: float32 ``[P, d]`` from :func:`rope_cos_sin`.

    Returns:
        float32 tensor of the shape of ``x``. Each pair ``(i, i + d/2)`` keeps its norm.

    Raises:
        ValueError: the position counts or the last dimensions differ.
    """
    if x.shape[0] != cos.shape[0] or x.shape[-1] != cos.shape[-1]:
        raise ValueError(f"x {tuple(x.shape)} does not match cos {tuple(cos.shape)}")
    x = x.to(torch.float32)
    if x.dim() == 3:
        cos, sin = cos[:, None, :], sin[:, None, :]
    return x * cos + rotate_half(x) * sin


def mean_pool(x: torch.Tensor, ratio: int) -> torch.Tensor:
    """Mean over consecutive groups of ``ratio`` rows: row ``g`` averages rows ``[g r, g r + r)``.

    This is the stand-in for DeepSeek-V4's learned KV compressor used by the generator; a
    trailing incomplete group is dropped (a query only ever sees complete groups).

    Args:
        x: float tensor ``[N, ...]``.
        ratio: group size ``r >= 1``.

    Returns:
        float32 tensor ``[N // r, ...]`` (the mean is accumulated in float64).

    Raises:
        ValueError: ``ratio < 1``.
    """
    if ratio < 1:
        raise ValueError(f"ratio must be >= 1, got {ratio}")
    groups = x.shape[0] // ratio
    grouped = x[: groups * ratio].to(torch.float64).reshape(groups, ratio, *x.shape[1:])
    return grouped.mean(dim=1).to(torch.float32)


def gemma_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Gemma's RMS norm ``x * rsqrt(mean(x^2, -1) + eps) * (1 + weight)`` in float32.

    Args:
        x: float tensor ``[..., d]``.
        weight: float tensor ``[d]`` (Gemma stores the offset from 1).
        eps: the model's ``rms_norm_eps``.

    Returns:
        float32 tensor of the shape of ``x``.
    """
    x = x.to(torch.float32)
    normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return normed * (1.0 + weight.to(torch.float32))


def quantize_symmetric(
    x: torch.Tensor, bits: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Symmetric quantization to ``bits`` bits with a float32 scale per column and per row.

    With ``L = 2 ** (bits - 1) - 1`` levels on each side of zero (127 for 8 bits, 31 for 6):
    ``channel_scale[j] = max_i |x[i, j]|`` (1 for an all-zero column), ``y = x / channel_scale``,
    ``scale[i] = max_j |y[i, j]| / L`` (1 for an all-zero row) and ``q = round(y / scale)`` in
    ``[-L, L]``, so :func:`dequantize_int8` is within ``scale[i] * channel_scale[j] / 2`` of
    every element.

    Args:
        x: float tensor ``[R, d]``.
        bits: 2 to 8.

    Returns:
        ``(q, scale, channel_scale)``: int8 ``[R, d]`` codes in ``[-L, L]``, float32 ``[R]``,
        float32 ``[d]``.

    Raises:
        ValueError: ``bits`` outside 2-8.
    """
    if not 2 <= bits <= 8:
        raise ValueError(f"bits must be in 2..8, got {bits}")
    levels = float(2 ** (bits - 1) - 1)
    x = x.to(torch.float32)
    col = x.abs().amax(dim=0)
    col = torch.where(col > 0, col, torch.ones_like(col))
    y = x / col
    row = y.abs().amax(dim=-1) / levels
    row = torch.where(row > 0, row, torch.ones_like(row))
    q = torch.round(y / row[:, None]).clamp_(-levels, levels).to(torch.int8)
    return q, row, col


def quantize_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Symmetric int8 quantization with a float32 scale per column and per row.

    :func:`quantize_symmetric` with 8 bits (127 levels each side). The per-column scale matters
    for Gemma's layer-5 keys: ``k_norm`` scales a few channels far above the rest (max/rms ~6
    per token) and zeroes five, so a per-row scale alone costs ~2% of the score range, the two
    together ~0.4%.

    DeepSeek-V3.2 also keeps its indexer keys in 8 bits (FP8 e4m3 with one fp32 scale per 128
    elements, ``act_quant`` in ``inference/model.py`` of DeepSeek-V3.2-Exp); int8 with these
    scales is more accurate than e4m3 on this data and is readable by numpy.

    Args:
        x: float tensor ``[R, d]``.

    Returns:
        ``(q, scale, channel_scale)``: int8 ``[R, d]``, float32 ``[R]``, float32 ``[d]``.
    """
    return quantize_symmetric(x, 8)


def pack_int6(q: torch.Tensor) -> torch.Tensor:
    """Pack 6-bit codes (``[-31, 31]``, from ``quantize_symmetric(x, 6)``) four to three bytes.

    Each code is offset to ``c = q + 32`` (1..63); the four codes ``c0..c3`` of columns
    ``4 j .. 4 j + 3`` form the 24-bit little-endian word ``c0 | c1 << 6 | c2 << 12 | c3 << 18``,
    stored as bytes ``3 j .. 3 j + 2``. ``gvr_reference.realdata`` unpacks it with numpy.

    Args:
        q: int8 ``[R, d]`` with ``d`` a multiple of 4 and every code in ``[-31, 31]``.

    Returns:
        uint8 ``[R, 3 d / 4]``.

    Raises:
        ValueError: ``d`` is not a multiple of 4 or a code is out of range.
    """
    rows, d = q.shape
    if d % 4:
        raise ValueError(f"the row width must be a multiple of 4, got {d}")
    if bool((q.abs() > 31).any()):
        raise ValueError("6-bit codes must lie in [-31, 31]")
    c = (q.to(torch.int32) + 32).reshape(rows, d // 4, 4)
    word = c[..., 0] | (c[..., 1] << 6) | (c[..., 2] << 12) | (c[..., 3] << 18)
    packed = torch.stack([word & 0xFF, (word >> 8) & 0xFF, (word >> 16) & 0xFF], dim=-1)
    return packed.reshape(rows, 3 * d // 4).to(torch.uint8)


def dequantize_int8(
    q: torch.Tensor, scale: torch.Tensor, channel_scale: torch.Tensor
) -> torch.Tensor:
    """Inverse of :func:`quantize_symmetric`, in float32 and in this order:
    ``(q * scale[:, None]) * channel_scale[None, :]``.

    ``gvr_reference.realdata`` decodes stored samples with the same two float32 products, so
    both give bit-identical arrays.

    Args:
        q: int8 ``[R, d]`` codes (8 or 6 bits).
        scale: float32 ``[R]``.
        channel_scale: float32 ``[d]``.

    Returns:
        float32 ``[R, d]``.
    """
    out = q.to(torch.float32) * scale.to(torch.float32)[:, None]
    return out * channel_scale.to(torch.float32)[None, :]
