"""Build a real-input sample (layer-5 k/v caches, decode queries, head weights) and write it.

A sample is one safetensors file that :func:`gvr_reference.realdata.load_sample` reads. For a
sequence of ``N`` tokens (``<bos>`` at position 0, then the text from its first character) and
the last ``T`` positions ``t = N - T .. N - 1`` as decode queries it holds (format
``gvr-realgen-sample/2``):

==================== ================== =====================================================
tensor               shape              meaning
==================== ================== =====================================================
``k_unrotated``      ``[N, 256]``       layer-5 keys after ``k_norm``, before RoPE
``v``                ``[N, 256]``       layer-5 values (the KV entries attention reads)
``q``                ``[T, 4, 256]``    rotated layer-5 queries of positions ``N - T .. N - 1``
``positions``        ``[T]`` int32      those positions
``weights_positive`` ``[T, 4]`` fp32    ``1 / sqrt(4) = 0.5`` for every head
``weights_signed``   ``[T, 4]`` fp32    ``0.5 * N(0, 1)`` draws (seeded), one 4-vector per row
``tokens``           ``[N]`` int32      the token ids
==================== ================== =====================================================

The loader rotates the keys at their positions (RoPE as recorded in the metadata entries
``rope_theta`` and ``rope_position_scale``) and derives the compressed keys: the unrotated keys
mean-pooled over groups of ``compress_ratio``, group ``g`` rotated at position
``compress_ratio * g``. Storing the keys before RoPE costs nothing in accuracy and lets one
stored cache serve both.

``k_unrotated`` is stored as ``int8`` (with ``<name>_scale`` ``[rows]`` and
``<name>_channel_scale`` ``[256]`` fp32, see :func:`~gvr_reference.realgen.ops.quantize_int8`),
``float16`` or ``float32``; ``v`` likewise or as 6-bit codes with the same two scales, packed
four to three bytes (uint8 ``[N, 192]``, :func:`~gvr_reference.realgen.ops.pack_int6`); ``q``
as ``float16`` or ``float32``. Provenance goes into the safetensors header as string metadata,
with the storage error of each decoded cache against the generator's float32 values.
"""

from __future__ import annotations

import json
import logging
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..realdata import SAMPLE_FORMAT, _decode_sample
from .capture import LAYER, Layer5, layer5_projections, residual_into_layer, verify_layer5
from .model import (
    BASE_MODEL,
    GGUF_PACKAGE,
    GGUF_PACKAGE_VERSION,
    GGUF_SOURCE,
    MODEL_LICENCE,
    LoadedModel,
    package_versions,
)
from .ops import interpolation_scale, pack_int6, quantize_int8, quantize_symmetric
from .text import Text

__all__ = [
    "SampleSpec",
    "tokenize_prefix",
    "build_sample",
    "write_sample",
    "default_name",
    "FORMAT",
    "CAVEAT",
]

log = logging.getLogger(__name__)

FORMAT = SAMPLE_FORMAT
CACHE_DTYPES = ("int8", "float16", "float32")
VALUE_DTYPES = ("auto", "int6", "int8", "float16", "float32")
QUERY_DTYPES = ("float16", "float32")
CAVEAT = (
    "Not DeepSeek outputs: q/k/v come from one attention layer of a small model "
    "(Gemma-3-270M layer 5: 4 query heads instead of DeepSeek's 64 indexer heads, head_dim 256 "
    "instead of 128), the head weights are fixed (0.5) or random instead of a learned "
    "weights_proj, the compressed keys are mean-pooled instead of DeepSeek-V4's learned "
    "compressor, and the scores are fp32 products of the stored values, not FP8. The weights "
    "and the text are real; the structure (attention sink at <bos>, recency, value spread) "
    "comes from a trained model."
)


@dataclass(frozen=True)
class SampleSpec:
    """What to generate.

    Attributes:
        n_tokens: sequence length ``N`` including ``<bos>`` (>= 2 * queries; a multiple of
            ``compress_ratio`` keeps every key in a complete group).
        n_queries: number ``T`` of decode positions at the end (the last ``T`` positions).
        chunk: tokens per forward call of layers 0-4.
        cache_dtype: storage of the keys: ``int8``, ``float16`` or ``float32``.
        value_dtype: storage of ``v``: ``int6``, ``int8``, ``float16``, ``float32`` or ``auto``
            (``int6`` with ``int8`` keys, else ``cache_dtype``; see :attr:`values`).
        query_dtype: storage of ``q``: ``float16`` or ``float32``.
        compress_ratio: group size of the compressed keys the loader derives.
        signed_seed: seed of ``torch.Generator`` for ``weights_signed``.
        verify_tokens: length of the layer-5 check input (0 skips the check).
    """

    n_tokens: int = 4096
    n_queries: int = 64
    chunk: int = 2048
    cache_dtype: str = "int8"
    value_dtype: str = "auto"
    query_dtype: str = "float16"
    compress_ratio: int = 4
    signed_seed: int = 0
    verify_tokens: int = 1500

    def validate(self) -> None:
        """Raise ``ValueError`` on an inconsistent spec."""
        if self.n_tokens < 2 or not 1 <= self.n_queries <= self.n_tokens:
            raise ValueError(f"need 1 <= n_queries <= n_tokens, got {self}")
        if self.cache_dtype not in CACHE_DTYPES:
            raise ValueError(f"cache_dtype must be one of {CACHE_DTYPES}")
        if self.value_dtype not in VALUE_DTYPES:
            raise ValueError(f"value_dtype must be one of {VALUE_DTYPES}")
        if self.query_dtype not in QUERY_DTYPES:
            raise ValueError(f"query_dtype must be one of {QUERY_DTYPES}")
        if self.compress_ratio < 1 or self.chunk < 1 or self.verify_tokens < 0:
            raise ValueError(f"compress_ratio and chunk must be >= 1, verify_tokens >= 0: {self}")

    @property
    def values(self) -> str:
        """The storage of ``v``: ``value_dtype``, with ``auto`` resolved.

        ``auto`` is ``int6`` next to ``int8`` keys: that is the committed sample, whose two
        8-bit caches of 4096 x 256 would fill the whole 2 MiB budget by themselves; the values
        do not enter the indexer scores. With 16- or 32-bit keys it is the keys' dtype.
        """
        if self.value_dtype != "auto":
            return self.value_dtype
        return "int6" if self.cache_dtype == "int8" else self.cache_dtype


def tokenize_prefix(tokenizer, text: str, n_tokens: int) -> tuple[torch.Tensor, int]:
    """The first ``n_tokens`` ids of ``<bos> + text`` and how many characters they cover.

    Tokenizes growing prefixes of ``text`` (8 characters per wanted token, doubled until there
    are at least 64 tokens to spare), so a long text is not tokenized whole; the kept ids do not
    depend on the prefix length because the margin is far beyond any merge boundary.

    Args:
        tokenizer: a fast Gemma tokenizer (adds ``<bos>``).
        text: the text.
        n_tokens: ids wanted, ``<bos>`` included.

    Returns:
        ``(ids, chars)``: int64 ``[n_tokens]`` and the end offset in ``text`` of the last kept
        token.

    Raises:
        ValueError: the whole text has fewer tokens, or the tokenizer does not add ``<bos>``.
    """
    chars = 8 * n_tokens
    while True:
        enc = tokenizer(text[:chars], return_offsets_mapping=True)
        if len(enc.input_ids) >= n_tokens + 64 or chars >= len(text):
            break
        chars *= 2
    if len(enc.input_ids) < n_tokens:
        raise ValueError(f"the text has only {len(enc.input_ids)} tokens, {n_tokens} wanted")
    if enc.input_ids[0] != tokenizer.bos_token_id:
        raise ValueError("the tokenizer did not put <bos> first")
    ids = torch.tensor(enc.input_ids[:n_tokens], dtype=torch.int64)
    return ids, int(enc.offset_mapping[n_tokens - 1][1])


def _store(name: str, x: torch.Tensor, dtype: str, out: dict[str, torch.Tensor]) -> None:
    if dtype == "int8":
        q, scale, channel = quantize_int8(x)
        out[name], out[f"{name}_scale"], out[f"{name}_channel_scale"] = q, scale, channel
    elif dtype == "int6":
        q, scale, channel = quantize_symmetric(x, 6)
        out[name], out[f"{name}_scale"] = pack_int6(q), scale
        out[f"{name}_channel_scale"] = channel
    else:
        out[name] = x.to(getattr(torch, dtype)).contiguous()


def build_sample(
    loaded: LoadedModel, text: Text, spec: SampleSpec, command: str
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Run the model and assemble the sample's tensors and metadata.

    Args:
        loaded: the model from :func:`~gvr_reference.realgen.model.load_model`.
        text: the text (see :mod:`~gvr_reference.realgen.text`).
        spec: what to generate.
        command: the command line, recorded as ``generator``.

    Returns:
        ``(tensors, metadata)`` ready for :func:`write_sample`.

    Raises:
        ValueError: an invalid spec or a text too short for it.
    """
    spec.validate()
    model, cfg = loaded.model, loaded.model.config
    n, t = spec.n_tokens, spec.n_queries
    ids, chars = tokenize_prefix(loaded.tokenizer, text.text, n)
    log.info("%s: %d tokens cover %d characters", text.name, n, chars)

    check: dict[str, float | int] = {}
    if spec.verify_tokens:
        check = dict(verify_layer5(model, ids[: spec.verify_tokens], chunk=256))
        check["tokens"] = min(spec.verify_tokens, n)
        check["chunk"] = 256

    start = time.perf_counter()
    hidden = residual_into_layer(model, ids, LAYER, chunk=spec.chunk)
    seconds = time.perf_counter() - start
    log.info("layers 0-4: %.1f s (%.2f ms/token)", seconds, 1e3 * seconds / n)

    trained = int(cfg.max_position_embeddings)
    scale = interpolation_scale(n, trained)
    theta = float(cfg.rope_parameters["full_attention"]["rope_theta"])
    positions = torch.arange(n - t, n)
    proj = layer5_projections(
        model.layers[LAYER],
        hidden,
        positions,
        theta=theta,
        scale=scale,
        eps=cfg.rms_norm_eps,
        compress_ratio=spec.compress_ratio,
    )
    heads = int(proj.q.shape[1])
    gen = torch.Generator().manual_seed(spec.signed_seed)
    signed = torch.randn(t, heads, generator=gen, dtype=torch.float32) * heads**-0.5

    tensors: dict[str, torch.Tensor] = {}
    _store("k_unrotated", proj.k_unrotated, spec.cache_dtype, tensors)
    _store("v", proj.v, spec.values, tensors)
    tensors["q"] = proj.q.to(getattr(torch, spec.query_dtype)).contiguous()
    tensors["positions"] = positions.to(torch.int32)
    tensors["weights_positive"] = torch.full((t, heads), heads**-0.5, dtype=torch.float32)
    tensors["weights_signed"] = signed
    tensors["tokens"] = ids.to(torch.int32)

    if scale == 1.0:
        interp = f"none (N = {n} <= {trained} trained positions)"
    else:
        interp = f"linear: RoPE position = p * {trained} / {n} = p * {scale:g} (q and k)"
    d = int(proj.k.shape[1])
    scales = f"fp32 <name>_scale [rows] and <name>_channel_scale [{d}]"
    decode = "decode (codes.astype(f32) * scale[:, None]) * channel_scale[None, :] in fp32"
    notes = {
        "int8": f"int8 codes in [-127, 127] with {scales}; {decode}",
        "int6": f"6-bit codes in [-31, 31] with {scales}, stored as code + 32 and packed four "
        f"to three bytes (uint8 [rows, {3 * d // 4}]: bytes 3j..3j+2 are the little-endian word "
        f"c0 | c1 << 6 | c2 << 12 | c3 << 18 of columns 4j..4j+3); {decode}",
        "float16": "float16 (upcast to fp32)",
        "float32": "float32",
    }
    ratio = spec.compress_ratio
    meta_rope = {
        "format": FORMAT,
        "rope_theta": repr(theta),
        "rope_position_scale": repr(scale),
        "compress_ratio": str(ratio),
    }
    error = _storage_error(tensors, meta_rope, proj)
    log.info("storage error of the decoded caches: %s", error)
    versions = package_versions()
    versions["python"] = f"{platform.python_implementation()} {platform.python_version()}"
    meta = {
        "format": FORMAT,
        "model": f"{BASE_MODEL} (base), GGUF Q4_K_M de-quantized to fp32 by transformers",
        "model_package": f"{GGUF_PACKAGE}=={GGUF_PACKAGE_VERSION} (+ -part1..-part4 "
        f"=={GGUF_PACKAGE_VERSION}); GGUF source {GGUF_SOURCE}",
        "gguf_sha256": loaded.gguf_sha256,
        "dequantized_weights_sha256": loaded.weights_sha256,
        "model_licence": MODEL_LICENCE,
        "layer": str(LAYER),
        "layer_kind": "first global (full-attention) layer; layers 0-4 sliding-window 512",
        "heads": str(heads),
        "kv_heads": "1",
        "head_dim": str(d),
        "qk": "x = input_layernorm(h); q = q_norm(q_proj(x)); k = k_norm(k_proj(x)); "
        "v = v_proj(x); q stored rotated; k stored before RoPE (k_unrotated) and rotated at "
        "position s on load; v never rotated",
        "rope": f"rotate-half (non-interleaved), theta {theta:g}, angles in float64: "
        f"inv_freq[i] = 1 / theta ** (2i / {d}), angle (p * rope_position_scale) * inv_freq[i] "
        f"in columns i and i + {d // 2}, cos/sin rounded to fp32, x * cos + rotate_half(x) * sin "
        "in fp32",
        "rope_theta": meta_rope["rope_theta"],
        "rope_position_scale": meta_rope["rope_position_scale"],
        "interpolation": interp,
        "trained_positions": str(trained),
        "compress_ratio": str(ratio),
        "compression": f"derived on load: k_unrotated (decoded) mean-pooled over [{ratio}g, "
        f"{ratio}g+{ratio - 1}] in float64, rounded to fp32, rotated at position {ratio}g "
        f"(times rope_position_scale); a query at t sees (t + 1) // {ratio} groups",
        "score": "I[t, s] = sum_h w[t, h] * relu(q[t, h] . k[s]) for s <= t "
        "(unscaled dot products)",
        "weights": f"weights_positive: 1/sqrt({heads}) for every head; weights_signed: "
        f"torch.Generator().manual_seed({spec.signed_seed}), randn({t}, {heads}) / "
        f"sqrt({heads}), one row per query (imitates DeepSeek's signed weights_proj)",
        "text": text.name,
        "text_source": text.source,
        "text_licence": text.licence,
        "text_sha256": text.sha256,
        "text_char_offset": "0",
        "text_chars_used": str(chars),
        "token_offset": "0",
        "bos": f"<bos> (id {int(ids[0])}) at position 0; position s >= 1 holds text token s - 1",
        "n_tokens": str(n),
        "n_queries": str(t),
        "query_positions": f"{n - t}..{n - 1} (the last {t})",
        "storage": json.dumps(
            {
                "k_unrotated": notes[spec.cache_dtype],
                "v": notes[spec.values],
                "q": f"{spec.query_dtype}, rotated",
            }
        ),
        "storage_error": json.dumps(error),
        "chunk": str(spec.chunk),
        "layer5_check": json.dumps(check),
        "layers_0_4_seconds": f"{seconds:.1f}",
        "generator": command,
        "date": time.strftime("%Y-%m-%d"),
        "versions": json.dumps(versions),
        "licences": f"weights: {MODEL_LICENCE}; text: {text.licence}; "
        "generator code: Apache-2.0 (gvr-reference)",
        "caveat": CAVEAT,
    }
    return tensors, meta


def _storage_error(
    tensors: dict[str, torch.Tensor], meta: dict[str, str], proj: Layer5
) -> dict[str, dict[str, float]]:
    """How far the loader's float32 caches are from the generator's own float32 values.

    Decodes ``tensors`` exactly as :func:`gvr_reference.realdata.load_sample` does and, for
    ``k``, ``k_compressed`` and ``v``, returns ``max_rel`` (max abs error / max abs value) and
    ``rms_rel`` (rms error / rms value), rounded to 3 significant digits.
    """
    arrays = {name: x.numpy() for name, x in tensors.items()}
    k, v, kc, _ = _decode_sample(arrays, meta)
    out = {}
    for name, got, ref in (
        ("k", k, proj.k),
        ("k_compressed", kc, proj.k_compressed),
        ("v", v, proj.v),
    ):
        ref = ref.numpy().astype(np.float64)
        diff = got.astype(np.float64) - ref
        out[name] = {
            "max_rel": float(f"{np.abs(diff).max() / np.abs(ref).max():.3g}"),
            "rms_rel": float(f"{np.sqrt(np.mean(diff**2) / np.mean(ref**2)):.3g}"),
        }
    return out


def write_sample(path: str | Path, tensors: dict[str, torch.Tensor], meta: dict[str, str]) -> Path:
    """Write the sample to ``path`` (parent directories are created).

    Returns:
        The path; its size is logged.
    """
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path), metadata=meta)
    size = path.stat().st_size
    log.info("wrote %s (%d bytes, %.2f MiB)", path, size, size / 2**20)
    return path


def default_name(text: Text, spec: SampleSpec) -> str:
    """``gemma3-270m-l5-<text>-<N in K>`` plus the cache dtype unless it is int8."""
    size = f"{spec.n_tokens // 1024}k" if spec.n_tokens % 1024 == 0 else str(spec.n_tokens)
    suffix = "" if spec.cache_dtype == "int8" else f"-{spec.cache_dtype}"
    return f"gemma3-270m-l{LAYER}-{text.name}-{size}{suffix}"
