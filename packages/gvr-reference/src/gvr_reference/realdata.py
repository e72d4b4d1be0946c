"""Real indexer inputs: a committed sample from a real model over real text, and score rows.

The package ships a small sample made by ``python -m gvr_reference.realgen`` (see
``docs/real-input.md`` and ``data/PROVENANCE.md``): the layer-5 key and value caches of
Gemma-3-270M over the first 4096 tokens of the King James Bible, the queries of the last 64
positions and head weights. The keys are stored before RoPE; :func:`load_sample` rotates them
and derives the mean-pooled (compress ratio 4) key cache from them. From it,
:func:`indexer_scores` builds DeepSeek-style lightning-indexer score rows

    I[t, s] = sum_h w[t, h] * relu(q[t, h] . k[s])        for s < row length

(DeepSeek-V3.2 paper, eq. 1; ``Indexer.forward`` in ``inference/model.py`` of DeepSeek-V3.2-Exp),
with the decode semantics of multi-token prediction and of compressed keys, so a DSA pipeline
(scores, exact top-K, sparse attention over the selected KV positions) runs on real data without
the model. :func:`load_shared_rows` reads ready-made fp32 rows (``logits``, ``lengths``).

These are not DeepSeek outputs: 4 heads instead of 64, fixed or random head weights, mean
pooling instead of a learned compressor, fp32 instead of FP8. Only numpy and safetensors are
needed here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from importlib import resources
from pathlib import Path
from types import MappingProxyType

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

__all__ = [
    "DEFAULT_SAMPLE",
    "RealSample",
    "available_samples",
    "sample_path",
    "load_sample",
    "indexer_scores",
    "load_shared_rows",
    "save_rows",
]

DEFAULT_SAMPLE = "gemma3-270m-l5-kjv-4k"
SAMPLE_FORMAT = "gvr-realgen-sample/2"
# Format 1 stored the rotated keys ``k`` and the pooled keys ``k_compressed`` themselves;
# samples generated with it still load.
SAMPLE_FORMAT_1 = "gvr-realgen-sample/1"
SAMPLE_FORMATS = (SAMPLE_FORMAT_1, SAMPLE_FORMAT)
WEIGHT_MODES = ("positive", "signed")


def _frozen(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    a.flags.writeable = False
    return a


@dataclass(frozen=True, eq=False)
class RealSample:
    """A real-input sample, decoded to float32 (arrays are read-only).

    ``N`` tokens (``<bos>`` at position 0), ``T`` decode queries at positions
    ``positions = N - T .. N - 1``, ``H`` query heads sharing one key head of dim ``d``.

    Attributes:
        name: the sample's name (file stem).
        k: float32 ``[N, d]``: rotated keys; ``k[s]`` belongs to position ``s`` (samples store
            the keys before RoPE and :func:`load_sample` rotates them).
        v: float32 ``[N, d]``: values (what sparse attention reads at the selected positions).
        q: float32 ``[T, H, d]``: rotated queries; ``q[i]`` belongs to ``positions[i]``.
        positions: int64 ``[T]``: consecutive query positions.
        weights: read-only mapping ``"positive"`` / ``"signed"`` -> float32 ``[T, H]`` head
            weights, row ``i`` for ``positions[i]``. Positive: ``1/sqrt(H)`` everywhere;
            signed: ``N(0, 1) / sqrt(H)`` draws (seeded, see ``metadata["weights"]``).
        k_compressed: float32 ``[N // compress_ratio, d]``: keys (after the key norm, before
            RoPE) averaged over groups ``[r g, r g + r)`` and rotated at position ``r g``;
            derived from the stored keys on load.
        compress_ratio: ``r`` of ``k_compressed`` (4).
        tokens: int32 ``[N]`` token ids of the model's tokenizer.
        metadata: the provenance strings of the file header (model, text, RoPE, versions, ...).
        path: the file it was read from.
    """

    name: str
    k: np.ndarray
    v: np.ndarray
    q: np.ndarray
    positions: np.ndarray
    weights: Mapping[str, np.ndarray]
    k_compressed: np.ndarray
    compress_ratio: int
    tokens: np.ndarray
    metadata: Mapping[str, str]
    path: str

    @property
    def n_tokens(self) -> int:
        """``N``, the number of cached tokens."""
        return int(self.k.shape[0])

    @property
    def n_heads(self) -> int:
        """``H``, query heads per position."""
        return int(self.q.shape[1])

    @property
    def head_dim(self) -> int:
        """``d``."""
        return int(self.k.shape[1])

    @cached_property
    def v_compressed(self) -> np.ndarray:
        """float32 ``[N // r, d]``: ``v`` averaged over the groups of ``k_compressed``.

        Values carry no RoPE, so pooling the stored values is what a mean-pooling compressor
        would produce (up to storage rounding); computed in float64, rounded to float32.
        """
        r = self.compress_ratio
        g = self.n_tokens // r
        pooled = self.v[: g * r].astype(np.float64).reshape(g, r, -1).mean(axis=1)
        return _frozen(pooled.astype(np.float32))


def available_samples() -> list[str]:
    """Names of the samples shipped in ``gvr_reference/data`` (sorted)."""
    data = resources.files("gvr_reference").joinpath("data")
    return sorted(
        p.name[: -len(".safetensors")] for p in data.iterdir() if p.name.endswith(".safetensors")
    )


def sample_path(name: str | None = None) -> Path:
    """The file of a shipped sample, or ``name`` itself if it is a path to a file.

    Args:
        name: a sample name (see :func:`available_samples`), a path ending in
            ``.safetensors``, or ``None`` for :data:`DEFAULT_SAMPLE`.

    Raises:
        FileNotFoundError: no such sample or file.
    """
    name = DEFAULT_SAMPLE if name is None else str(name)
    if name.endswith(".safetensors") or "/" in name or "\\" in name:
        path = Path(name)
    else:
        path = Path(str(resources.files("gvr_reference").joinpath("data", f"{name}.safetensors")))
    if not path.is_file():
        raise FileNotFoundError(f"no sample {name!r}; shipped samples: {available_samples()}")
    return path


def _unpack_int6(packed: np.ndarray) -> np.ndarray:
    """int8 codes ``[R, 4 w / 3]`` in ``[-31, 31]`` from 6-bit codes packed into uint8 ``[R, w]``.

    Bytes ``3 j .. 3 j + 2`` are the little-endian 24-bit word ``c0 | c1 << 6 | c2 << 12 |
    c3 << 18`` of the codes of columns ``4 j .. 4 j + 3``, each stored as ``code + 32``
    (``realgen.ops.pack_int6``).
    """
    rows, width = packed.shape
    if width % 3:
        raise ValueError(f"packed 6-bit rows must be a multiple of 3 bytes, got {width}")
    b = packed.reshape(rows, width // 3, 3).astype(np.int32)
    word = b[..., 0] | (b[..., 1] << 8) | (b[..., 2] << 16)
    codes = np.stack([(word >> shift) & 63 for shift in (0, 6, 12, 18)], axis=-1) - 32
    return codes.reshape(rows, 4 * (width // 3)).astype(np.int8)


def _decode(tensors: Mapping[str, np.ndarray], name: str) -> np.ndarray:
    """float32 view of a stored cache tensor (int8 or packed 6-bit + scales, float16/32)."""
    x = tensors[name]
    if x.dtype in (np.int8, np.uint8):
        codes = x if x.dtype == np.int8 else _unpack_int6(x)
        scale = tensors[f"{name}_scale"].astype(np.float32)
        channel = tensors[f"{name}_channel_scale"].astype(np.float32)
        # The same two float32 products, in the same order, as realgen.ops.dequantize_int8.
        return (codes.astype(np.float32) * scale[:, None]) * channel[None, :]
    if x.dtype in (np.float16, np.float32):
        return x.astype(np.float32)
    raise ValueError(f"{name}: unsupported storage dtype {x.dtype}")


def _rope_cos_sin(
    positions: np.ndarray, head_dim: int, theta: float, scale: float
) -> tuple[np.ndarray, np.ndarray]:
    """float32 ``[P, d]`` cos and sin of rotate-half RoPE at positions ``p * scale``.

    The same float64 steps as ``realgen.ops.rope_cos_sin``: ``inv_freq[i] = 1 / theta **
    (2 i / d)``, angle ``(p * scale) * inv_freq[i]`` in columns ``i`` and ``i + d/2``, rounded
    to float32 after ``cos``/``sin``.
    """
    inv_freq = 1.0 / (float(theta) ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    angles = np.asarray(positions, dtype=np.float64)[:, None] * float(scale) * inv_freq[None, :]
    angles = np.concatenate([angles, angles], axis=-1)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def _apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """``x * cos + rotate_half(x) * sin`` in float32 (``realgen.ops.apply_rope``)."""
    half = x.shape[-1] // 2
    rotated = np.concatenate([-x[:, half:], x[:, :half]], axis=-1)
    return x * cos + rotated * sin


def _decode_sample(
    tensors: Mapping[str, np.ndarray], meta: Mapping[str, str]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """``(k, v, k_compressed, compress_ratio)`` of a sample's stored tensors, in float32.

    Format 2 stores the keys after the key norm and before RoPE (``k_unrotated``): ``k[s]`` is
    that key rotated at position ``s``, and ``k_compressed[g]`` the mean (float64, rounded to
    float32) of the keys ``r g .. r g + r - 1`` rotated at position ``r g``, RoPE as recorded
    in ``rope_theta`` and ``rope_position_scale``. Format 1 stored ``k`` and ``k_compressed``.
    The generator calls this too, to measure what a sample's readers get.
    """
    ratio = int(meta["compress_ratio"])
    v = _decode(tensors, "v")
    if meta.get("format") == SAMPLE_FORMAT_1:
        return _decode(tensors, "k"), v, _decode(tensors, "k_compressed"), ratio
    raw = _decode(tensors, "k_unrotated")
    theta, scale = float(meta["rope_theta"]), float(meta["rope_position_scale"])
    n, d = raw.shape
    k = _apply_rope(raw, *_rope_cos_sin(np.arange(n), d, theta, scale))
    g = n // ratio
    pooled = raw[: g * ratio].astype(np.float64).reshape(g, ratio, d).mean(axis=1)
    pooled = pooled.astype(np.float32)
    kc = _apply_rope(pooled, *_rope_cos_sin(np.arange(g) * ratio, d, theta, scale))
    return k, v, kc, ratio


def load_sample(name: str | None = None) -> RealSample:
    """Load a real-input sample and decode it to float32.

    The caches are dequantized, the keys rotated by RoPE at their positions and the pooled
    keys derived from them (see ``data/PROVENANCE.md`` for the layout of the file).

    Args:
        name: a shipped sample name, a path to a sample ``.safetensors`` file, or ``None`` for
            :data:`DEFAULT_SAMPLE`.

    Returns:
        The :class:`RealSample`.

    Raises:
        FileNotFoundError: no such sample.
        ValueError: the file is not a sample (format, shapes or positions inconsistent).
    """
    path = sample_path(name)
    tensors = load_file(str(path))
    with safe_open(str(path), framework="np") as fh:
        meta = dict(fh.metadata() or {})
    if meta.get("format") not in SAMPLE_FORMATS:
        raise ValueError(f"{path}: format {meta.get('format')!r}, expected one of {SAMPLE_FORMATS}")
    try:
        k, v, kc, ratio = _decode_sample(tensors, meta)
    except KeyError as err:
        raise ValueError(f"{path}: missing tensor or metadata entry {err}") from None
    q = tensors["q"].astype(np.float32)
    positions = tensors["positions"].astype(np.int64)
    n, d = k.shape
    t, h, dq = q.shape
    problems = []
    if v.shape != (n, d) or dq != d:
        problems.append(f"k {k.shape}, v {v.shape}, q {q.shape} disagree")
    if kc.shape != (n // ratio, d):
        problems.append(f"k_compressed {kc.shape} is not [{n} // {ratio}, {d}]")
    if positions.shape != (t,) or np.any(np.diff(positions) != 1) or positions[-1] >= n:
        problems.append("positions are not consecutive positions inside the sequence")
    weights = {m: tensors[f"weights_{m}"].astype(np.float32) for m in WEIGHT_MODES}
    if any(w.shape != (t, h) for w in weights.values()):
        problems.append("weights are not [T, H]")
    if problems:
        raise ValueError(f"{path}: " + "; ".join(problems))
    return RealSample(
        name=path.name[: -len(".safetensors")],
        k=_frozen(k),
        v=_frozen(v),
        q=_frozen(q),
        positions=_frozen(positions),
        weights=MappingProxyType({m: _frozen(w) for m, w in weights.items()}),
        k_compressed=_frozen(kc),
        compress_ratio=ratio,
        tokens=_frozen(tensors["tokens"].astype(np.int32)),
        metadata=MappingProxyType(meta),
        path=str(path),
    )


def _row_weights(sample: RealSample, index: np.ndarray, weights: str | np.ndarray) -> np.ndarray:
    if isinstance(weights, str):
        if weights not in sample.weights:
            raise ValueError(f"weights must be one of {WEIGHT_MODES} or an array, got {weights!r}")
        return sample.weights[weights][index].astype(np.float64)
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (len(index), sample.n_heads):
        raise ValueError(f"weights array must be [rows, {sample.n_heads}], got {w.shape}")
    return w


def indexer_scores(
    sample: RealSample,
    positions: Sequence[int] | np.ndarray | None = None,
    *,
    next_n: int = 1,
    compress_ratio: int = 1,
    weights: str | np.ndarray = "positive",
    width: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Lightning-indexer score rows of a batch of decode requests, computed in numpy.

    The rows are grouped into requests of ``next_n`` consecutive query positions (multi-token
    prediction): request ``j`` holds rows ``j * next_n .. j * next_n + next_n - 1`` at positions
    ``p, p + 1, ..., p + next_n - 1`` and has ``kv_len = p + next_n`` cached tokens; row ``r``
    sees ``kv_len - next_n + r % next_n + 1`` tokens (its own position included), i.e.
    ``positions[r] + 1``. With ``compress_ratio = c > 1`` a row sees the ``that // c`` complete
    groups of pooled keys (``sample.k_compressed``; only ``c = sample.compress_ratio`` is stored).

    Row ``r`` is ``I[s] = sum_h w[r, h] * relu(q[positions[r], h] . key[s])`` for ``s`` below
    its length and ``-inf`` from its length to ``width``. Dot products and the head sum are
    evaluated in float64 and rounded once to float32, so the result does not depend on BLAS
    summation order.

    Args:
        sample: from :func:`load_sample`.
        positions: query positions, one per row (each in ``sample.positions``; ``len`` a
            multiple of ``next_n``, each group of ``next_n`` consecutive). ``None``: the last
            ``(T // next_n) * next_n`` stored positions.
        next_n: rows per request (1-4 in DeepSeek's MTP decode).
        compress_ratio: 1 (plain keys) or ``sample.compress_ratio`` (pooled keys).
        weights: ``"positive"``, ``"signed"`` (the sample's per-row head weights) or a float
            array ``[rows, H]``.
        width: columns of the result (default: the longest row); must cover every row.

    Returns:
        ``(logits, kv_lens)``: float32 ``[rows, width]`` and int32 ``[rows // next_n]``
        (per-request token counts, not divided by ``compress_ratio``).

    Raises:
        ValueError: a position without a stored query, a bad grouping, an unsupported ratio,
            a weights array of the wrong shape, or a ``width`` shorter than a row.
    """
    if next_n < 1:
        raise ValueError(f"next_n must be >= 1, got {next_n}")
    stored = sample.positions
    if positions is None:
        rows = (len(stored) // next_n) * next_n
        pos = stored[len(stored) - rows :].copy()
    else:
        pos = np.asarray(positions, dtype=np.int64).reshape(-1)
    if pos.size == 0 or pos.size % next_n:
        raise ValueError(f"need a positive multiple of next_n={next_n} positions, got {pos.size}")
    index = pos - stored[0]
    if np.any(index < 0) or np.any(index >= len(stored)):
        raise ValueError(f"positions must lie in [{stored[0]}, {stored[-1]}] (stored queries)")
    groups = pos.reshape(-1, next_n)
    if np.any(np.diff(groups, axis=1) != 1):
        raise ValueError("each group of next_n positions must be consecutive and increasing")
    kv_lens = (groups[:, -1] + 1).astype(np.int32)

    if compress_ratio == 1:
        keys = sample.k
        lengths = pos + 1
    elif compress_ratio == sample.compress_ratio:
        keys = sample.k_compressed
        lengths = (pos + 1) // compress_ratio
    else:
        raise ValueError(
            f"compress_ratio must be 1 or {sample.compress_ratio}, got {compress_ratio}"
        )
    w = _row_weights(sample, index, weights)
    longest = int(lengths.max())
    width = longest if width is None else int(width)
    if width < longest:
        raise ValueError(f"width {width} is shorter than the longest row ({longest})")

    logits = np.full((pos.size, width), -np.inf, dtype=np.float32)
    for r in range(pos.size):
        length = int(lengths[r])
        if length == 0:
            continue
        dots = sample.q[index[r]].astype(np.float64) @ keys[:length].astype(np.float64).T
        logits[r, :length] = (w[r] @ np.maximum(dots, 0.0)).astype(np.float32)
    return logits, kv_lens


def load_shared_rows(path: str | Path) -> tuple[np.ndarray, np.ndarray, dict[str, str]]:
    """Read ready-made score rows (e.g. ``shared/data/real-rows/*.safetensors``).

    The file holds ``logits`` (float32 ``[rows, width]``, valid on ``[0, lengths[i])`` and
    ``-inf`` beyond) and ``lengths`` (int32 ``[rows]``), with string metadata in the header
    (JSON-valued entries such as ``positions_t`` stay strings; ``json.loads`` them).

    Args:
        path: the ``.safetensors`` file.

    Returns:
        ``(logits, lengths, metadata)``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: missing tensors, wrong dtypes or shapes, a length outside ``[0, width]``,
            a non-finite value inside a row or a value other than ``-inf`` beyond it.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(path)
    tensors = load_file(str(path))
    with safe_open(str(path), framework="np") as fh:
        meta = dict(fh.metadata() or {})
    if "logits" not in tensors or "lengths" not in tensors:
        raise ValueError(f"{path}: needs tensors 'logits' and 'lengths', has {sorted(tensors)}")
    logits, lengths = tensors["logits"], tensors["lengths"]
    if logits.dtype != np.float32 or logits.ndim != 2:
        raise ValueError(
            f"{path}: logits must be float32 [rows, width], got {logits.dtype} {logits.shape}"
        )
    if lengths.dtype != np.int32 or lengths.shape != (logits.shape[0],):
        raise ValueError(
            f"{path}: lengths must be int32 [rows], got {lengths.dtype} {lengths.shape}"
        )
    if np.any(lengths < 0) or np.any(lengths > logits.shape[1]):
        raise ValueError(f"{path}: lengths outside [0, {logits.shape[1]}]")
    valid = np.arange(logits.shape[1])[None, :] < lengths[:, None]
    if not np.all(np.isfinite(logits[valid])) or not np.all(logits[~valid] == -np.inf):
        raise ValueError(f"{path}: rows must be finite within their length and -inf beyond")
    return logits, lengths, meta


def save_rows(
    path: str | Path, logits: np.ndarray, lengths: np.ndarray, metadata: Mapping[str, object]
) -> Path:
    """Write score rows in the format :func:`load_shared_rows` reads.

    Args:
        path: destination ``.safetensors`` file.
        logits: float32 ``[rows, width]``, ``-inf`` beyond each row's length.
        lengths: int ``[rows]`` (stored as int32).
        metadata: header entries; non-strings are stored as JSON.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.
    """
    meta = {k: v if isinstance(v, str) else json.dumps(v) for k, v in metadata.items()}
    path = Path(path)
    save_file(
        {
            "logits": np.ascontiguousarray(logits, dtype=np.float32),
            "lengths": np.ascontiguousarray(lengths, dtype=np.int32),
        },
        str(path),
        metadata=meta,
    )
    return path
