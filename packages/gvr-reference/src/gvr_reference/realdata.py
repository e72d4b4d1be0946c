"""Real indexer inputs: a committed sample from a real model over real text, and score rows.

The package ships a small sample made by ``python -m gvr_reference.realgen`` (see
``docs/real-input.md`` and ``data/PROVENANCE.md``): the layer-5 key and value caches of
Gemma-3-270M over the first 4096 tokens of the King James Bible, the queries of the last 64
positions, head weights, and the mean-pooled (compress ratio 4) key cache. From it,
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
SAMPLE_FORMAT = "gvr-realgen-sample/1"
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
        k: float32 ``[N, d]``: rotated keys; ``k[s]`` belongs to position ``s``.
        v: float32 ``[N, d]``: values (what sparse attention reads at the selected positions).
        q: float32 ``[T, H, d]``: rotated queries; ``q[i]`` belongs to ``positions[i]``.
        positions: int64 ``[T]``: consecutive query positions.
        weights: read-only mapping ``"positive"`` / ``"signed"`` -> float32 ``[T, H]`` head
            weights, row ``i`` for ``positions[i]``. Positive: ``1/sqrt(H)`` everywhere;
            signed: ``N(0, 1) / sqrt(H)`` draws (seeded, see ``metadata["weights"]``).
        k_compressed: float32 ``[N // compress_ratio, d]``: keys (after the key norm, before
            RoPE) averaged over groups ``[r g, r g + r)`` and rotated at position ``r g``.
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


def _decode(tensors: dict[str, np.ndarray], name: str) -> np.ndarray:
    """float32 view of a stored cache tensor (int8 + scales, float16 or float32)."""
    x = tensors[name]
    if x.dtype == np.int8:
        scale = tensors[f"{name}_scale"].astype(np.float32)
        channel = tensors[f"{name}_channel_scale"].astype(np.float32)
        # The same two float32 products, in the same order, as realgen.ops.dequantize_int8.
        return (x.astype(np.float32) * scale[:, None]) * channel[None, :]
    if x.dtype in (np.float16, np.float32):
        return x.astype(np.float32)
    raise ValueError(f"{name}: unsupported storage dtype {x.dtype}")


def load_sample(name: str | None = None) -> RealSample:
    """Load a real-input sample and decode it to float32.

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
    if meta.get("format") != SAMPLE_FORMAT:
        raise ValueError(f"{path}: format {meta.get('format')!r}, expected {SAMPLE_FORMAT!r}")
    k, v, kc = _decode(tensors, "k"), _decode(tensors, "v"), _decode(tensors, "k_compressed")
    q = tensors["q"].astype(np.float32)
    positions = tensors["positions"].astype(np.int64)
    n, d = k.shape
    t, h, dq = q.shape
    ratio = int(meta["compress_ratio"])
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
