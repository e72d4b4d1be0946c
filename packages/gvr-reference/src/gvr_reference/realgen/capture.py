"""Run Gemma-3-270M layers 0-4 over a long sequence and compute layer-5 q, k, v by hand.

Gemma-3-270M has 18 decoder layers; every sixth is global (layers 5, 11, 17), the others are
sliding-window (512) layers. Layer 5, the first global layer, has 4 query heads sharing one key
and value head of head_dim 256 (MQA), the shape of DeepSeek's lightning indexer (many query
heads, one key). Running layers 0-4 costs linear time in the length (a sliding-window cache),
and layer 5 is computed by hand from the residual stream entering it:

    x = input_layernorm(h)
    q = rope(q_norm(q_proj(x)))      [P, 4, 256]
    k = rope(k_norm(k_proj(x)))      [P, 256]
    v = v_proj(x)                    [P, 256]      (no norm, no RoPE on values)

with rotate-half RoPE of base ``1e6`` at position ``p * scale`` (``scale`` from
:func:`~gvr_reference.realgen.ops.interpolation_scale`; 1 up to 32,768 tokens). The module and
formulas follow ``Gemma3Attention.forward`` in ``transformers/models/gemma3/modeling_gemma3.py``;
:func:`verify_layer5` checks the hand computation against the model's own layer 5.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from .ops import apply_rope, gemma_rms_norm, mean_pool, rope_cos_sin

__all__ = ["Layer5", "residual_into_layer", "layer5_projections", "verify_layer5", "LAYER"]

log = logging.getLogger(__name__)

LAYER = 5


@contextlib.contextmanager
def _run_layers(model: torch.nn.Module, n_layers: int) -> Iterator[None]:
    """Temporarily make ``model`` run only its first ``n_layers`` decoder layers."""
    saved = model.config.num_hidden_layers
    model.config.num_hidden_layers = n_layers
    try:
        yield
    finally:
        model.config.num_hidden_layers = saved


@torch.inference_mode()
def residual_into_layer(
    model: torch.nn.Module,
    ids: torch.Tensor,
    layer: int = LAYER,
    chunk: int = 2048,
    progress: bool = True,
) -> torch.Tensor:
    """The residual stream entering decoder layer ``layer``, for every position.

    Runs decoder layers ``0 .. layer - 1`` over ``ids`` in chunks of ``chunk`` tokens with a
    ``transformers`` ``DynamicCache`` (sliding-window layers keep 511 past tokens), with plain
    positions ``0 .. N - 1`` (layers 0-4 are local, so their RoPE only sees distances < 512),
    and captures the output of layer ``layer - 1`` with a forward hook.

    Args:
        model: a ``Gemma3TextModel`` from :func:`~gvr_reference.realgen.model.load_model`.
        ids: int64 token ids ``[N]`` (``<bos>`` first).
        layer: the layer whose input is wanted (all earlier layers must be sliding-window).
        chunk: tokens per forward call. The fp32 summation order, and so the last bits of the
            result, depend on it.
        progress: show a tqdm bar.

    Returns:
        float32 ``[N, hidden]`` (hidden = 640).

    Raises:
        ValueError: a layer below ``layer`` is global (the cost would be quadratic).
    """
    from transformers import DynamicCache

    types = model.config.layer_types[:layer]
    if any(t != "sliding_attention" for t in types):
        raise ValueError(f"layers below {layer} must all be sliding-window, got {types}")
    n = int(ids.shape[0])
    out = torch.empty(n, model.config.hidden_size, dtype=torch.float32)
    captured: list[torch.Tensor] = []

    def hook(_module, _inputs, output):
        captured.append(output[0] if isinstance(output, tuple) else output)

    handle = model.layers[layer - 1].register_forward_hook(hook)
    cache = DynamicCache(config=model.config)
    try:
        with _run_layers(model, layer):
            bar = tqdm(total=n, unit="tok", desc=f"layers 0-{layer - 1}", disable=not progress)
            for start in range(0, n, chunk):
                stop = min(start + chunk, n)
                captured.clear()
                model(
                    input_ids=ids[None, start:stop],
                    position_ids=torch.arange(start, stop)[None, :],
                    cache=cache,
                    use_cache=True,
                )
                out[start:stop] = captured[0][0].to(torch.float32)
                bar.update(stop - start)
            bar.close()
    finally:
        handle.remove()
    return out


@dataclass(frozen=True)
class Layer5:
    """Hand-computed layer-5 projections.

    Attributes:
        q: float32 ``[P, H, d]`` rotated queries at the requested query positions.
        k: float32 ``[N, d]`` rotated keys at positions ``0 .. N-1``.
        k_unrotated: float32 ``[N, d]`` the same keys after ``k_norm`` and before RoPE (what a
            sample stores; the loader rotates them).
        v: float32 ``[N, d]`` values.
        k_compressed: float32 ``[N // r, d]``: keys after ``k_norm``, mean-pooled over groups
            ``[r g, r g + r)`` and rotated at position ``r g`` (``None`` if ``r`` was 0).
        scale: the position interpolation factor applied to the RoPE positions of q and k.
    """

    q: torch.Tensor
    k: torch.Tensor
    k_unrotated: torch.Tensor
    v: torch.Tensor
    k_compressed: torch.Tensor | None
    scale: float


@torch.inference_mode()
def layer5_projections(
    layer_module: torch.nn.Module,
    hidden: torch.Tensor,
    query_positions: torch.Tensor,
    *,
    theta: float,
    scale: float,
    eps: float,
    compress_ratio: int = 4,
) -> Layer5:
    """Compute layer-5 q (at ``query_positions``), k and v (everywhere) by hand.

    Args:
        layer_module: ``model.layers[5]`` (a ``Gemma3DecoderLayer``).
        hidden: float32 ``[N, hidden]`` residual stream entering the layer.
        query_positions: int64 ``[P]`` positions in ``[0, N)`` whose queries are wanted.
        theta: RoPE base of the layer (``1e6``).
        scale: linear position interpolation factor (1.0 up to the trained 32,768 positions).
        eps: the model's ``rms_norm_eps``.
        compress_ratio: group size of the mean-pooled keys (0: skip them).

    Returns:
        A :class:`Layer5`.
    """
    attn = layer_module.self_attn
    head_dim = attn.head_dim
    n = hidden.shape[0]
    x = gemma_rms_norm(hidden, layer_module.input_layernorm.weight, eps)
    k_raw = gemma_rms_norm(x @ attn.k_proj.weight.T, attn.k_norm.weight, eps)
    v = (x @ attn.v_proj.weight.T).to(torch.float32)
    xq = x[query_positions]
    q_raw = (xq @ attn.q_proj.weight.T).reshape(len(query_positions), -1, head_dim)
    q_raw = gemma_rms_norm(q_raw, attn.q_norm.weight, eps)

    cos, sin = rope_cos_sin(torch.arange(n), head_dim, theta, scale)
    k = apply_rope(k_raw, cos, sin)
    q = apply_rope(q_raw, cos[query_positions], sin[query_positions])
    k_compressed = None
    if compress_ratio:
        pooled = mean_pool(k_raw, compress_ratio)
        group_pos = torch.arange(pooled.shape[0]) * compress_ratio
        cos_c, sin_c = rope_cos_sin(group_pos, head_dim, theta, scale)
        k_compressed = apply_rope(pooled, cos_c, sin_c)
    return Layer5(q=q, k=k, k_unrotated=k_raw, v=v, k_compressed=k_compressed, scale=scale)


@torch.inference_mode()
def verify_layer5(model: torch.nn.Module, ids: torch.Tensor, chunk: int = 256) -> dict[str, float]:
    """Check the hand-computed layer 5 against the model's own, on a short input.

    The reference is one plain forward pass of layers 0-5 over ``ids`` with eager attention,
    which returns layer 5's attention probabilities. The hand path is the generator's:
    :func:`residual_into_layer` in chunks of ``chunk`` (so the sliding-window cache is crossed),
    then :func:`layer5_projections` and ``softmax(q k^T * query_pre_attn_scalar**-0.5)`` under a
    causal mask, and ``o_proj(P v)`` for the layer's attention output.

    Args:
        model: the truncated model from :func:`~gvr_reference.realgen.model.load_model`.
        ids: int64 ``[L]`` token ids, ``<bos>`` first, ``L <= 32768``.
        chunk: chunk size of the hand path.

    Returns:
        Max abs differences: ``residual`` (layer-5 input, relative to its max abs),
        ``attention_probs`` (absolute), ``attention_output`` (relative to its max abs).
    """
    cfg = model.config
    n = int(ids.shape[0])
    layer_module = model.layers[LAYER]
    ref: dict[str, torch.Tensor] = {}

    def grab_input(_module, args, kwargs):
        hs = kwargs.get("hidden_states", args[0] if args else None)
        ref["hidden"] = hs[0].clone()

    def grab_attn(_module, _inputs, output):
        ref["attn_out"], ref["probs"] = output[0][0].clone(), output[1][0].clone()

    saved_impl = cfg._attn_implementation
    cfg._attn_implementation = "eager"
    handles = [
        layer_module.register_forward_pre_hook(grab_input, with_kwargs=True),
        layer_module.self_attn.register_forward_hook(grab_attn),
    ]
    try:
        with _run_layers(model, LAYER + 1):
            model(input_ids=ids[None, :], position_ids=torch.arange(n)[None, :], use_cache=False)
    finally:
        for h in handles:
            h.remove()
        cfg._attn_implementation = saved_impl

    hidden = residual_into_layer(model, ids, LAYER, chunk=chunk, progress=False)
    theta = cfg.rope_parameters["full_attention"]["rope_theta"]
    proj = layer5_projections(
        layer_module,
        hidden,
        torch.arange(n),
        theta=theta,
        scale=1.0,
        eps=cfg.rms_norm_eps,
        compress_ratio=0,
    )
    logits = torch.einsum("thd,sd->hts", proj.q, proj.k) * cfg.query_pre_attn_scalar**-0.5
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    probs = torch.softmax(logits.masked_fill(~causal, float("-inf")), dim=-1)
    attn = torch.einsum("hts,sd->thd", probs, proj.v).reshape(n, -1)
    attn_out = attn @ layer_module.self_attn.o_proj.weight.T

    def rel(a: torch.Tensor, b: torch.Tensor) -> float:
        return float((a - b).abs().max() / b.abs().max())

    result = {
        "residual": rel(hidden, ref["hidden"]),
        "attention_probs": float((probs - ref["probs"]).abs().max()),
        "attention_output": rel(attn_out, ref["attn_out"]),
    }
    log.info("layer-5 check on %d tokens: %s", n, result)
    return result
