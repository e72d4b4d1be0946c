"""Command line of the real-input generator: ``python -m gvr_reference.realgen <command>``.

Commands:

- ``generate``: run Gemma-3-270M over a text and write a sample (see
  :mod:`~gvr_reference.realgen.sample`). The committed sample was made with
  ``python -m gvr_reference.realgen generate --text kjv --tokens 4096 --queries 64``.
- ``prepare``: only assemble the GGUF and build the de-quantized weight cache.
- ``verify``: only compare the hand-computed layer 5 with the model's own.
- ``rows``: turn a sample into fp32 score rows (``logits``, ``lengths``) for
  :func:`gvr_reference.realdata.load_shared_rows`.
- ``stats``: print the row properties of :mod:`~gvr_reference.realgen.stats` for a sample or a
  rows file.

``generate``, ``prepare`` and ``verify`` need the ``realgen`` extra (torch, transformers, gguf,
the weights package); ``rows`` and ``stats`` need only numpy and safetensors.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import sys
import time
from pathlib import Path

import numpy as np

__all__ = ["main", "build_parser"]

log = logging.getLogger("gvr_reference.realgen")


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of all commands."""
    parser = argparse.ArgumentParser(
        prog="python -m gvr_reference.realgen",
        description="Make real indexer inputs from Gemma-3-270M layer 5 over a real text.",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="log warnings only")
    sub = parser.add_subparsers(dest="command", required=True)

    def model_args(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--cache-dir",
            default=None,
            help="de-quantized weight cache (default $GVR_REALGEN_CACHE or ~/.cache/gvr-realgen)",
        )
        p.add_argument("--rebuild-cache", action="store_true", help="de-quantize again")
        p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch default)")

    gen = sub.add_parser("generate", help="run the model and write a sample")
    model_args(gen)
    gen.add_argument("--text", default="kjv", help="kjv, stdlib or file:PATH (default kjv)")
    gen.add_argument("--tokens", type=int, default=4096, help="N, <bos> included (default 4096)")
    gen.add_argument("--queries", type=int, default=64, help="T decode queries at the end")
    gen.add_argument("--chunk", type=int, default=2048, help="tokens per forward call")
    gen.add_argument(
        "--cache-dtype",
        default="int8",
        choices=("int8", "float16", "float32"),
        help="storage of the keys (default int8)",
    )
    gen.add_argument(
        "--value-dtype",
        default="auto",
        choices=("auto", "int6", "int8", "float16", "float32"),
        help="storage of the values (default auto: int6 with int8 keys, else the keys' dtype)",
    )
    gen.add_argument("--query-dtype", default="float16", choices=("float16", "float32"))
    gen.add_argument("--compress-ratio", type=int, default=4)
    gen.add_argument("--seed", type=int, default=0, help="seed of the signed head weights")
    gen.add_argument("--verify-tokens", type=int, default=1500, help="0 skips the layer-5 check")
    gen.add_argument("--out", default=None, help="output file (default ./<name>.safetensors)")

    prep = sub.add_parser("prepare", help="build the de-quantized weight cache")
    model_args(prep)

    ver = sub.add_parser("verify", help="check the hand-computed layer 5 against the model")
    model_args(ver)
    ver.add_argument("--text", default="kjv")
    ver.add_argument("--tokens", type=int, default=1500)
    ver.add_argument("--chunk", type=int, default=256)

    rows = sub.add_parser("rows", help="write fp32 score rows of a sample")
    rows.add_argument("--sample", default=None, help="sample name or path (default: shipped)")
    rows.add_argument("--out", required=True)
    rows.add_argument("--next-n", type=int, default=1)
    rows.add_argument("--compress-ratio", type=int, default=1)
    rows.add_argument("--weights", default="positive", choices=("positive", "signed"))

    st = sub.add_parser("stats", help="print row properties")
    st.add_argument("source", nargs="?", default=None, help="sample name/path or rows file")
    st.add_argument("--next-n", type=int, default=1)
    st.add_argument(
        "--compress-ratio",
        type=int,
        default=1,
        help="rows over compressed keys (recent@K then counts the last 2048 // ratio columns)",
    )
    st.add_argument("--weights", default="positive", choices=("positive", "signed"))
    st.add_argument("--json", action="store_true", help="one JSON object per row")
    return parser


def _setup_torch(threads: int) -> None:
    import torch

    if threads > 0:
        torch.set_num_threads(threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _generate(args: argparse.Namespace, command: str) -> None:
    from .model import load_model
    from .sample import SampleSpec, build_sample, default_name, write_sample
    from .text import load_text

    _setup_torch(args.threads)
    spec = SampleSpec(
        n_tokens=args.tokens,
        n_queries=args.queries,
        chunk=args.chunk,
        cache_dtype=args.cache_dtype,
        value_dtype=args.value_dtype,
        query_dtype=args.query_dtype,
        compress_ratio=args.compress_ratio,
        signed_seed=args.seed,
        verify_tokens=args.verify_tokens,
    )
    spec.validate()
    start = time.perf_counter()
    text = load_text(args.text)
    loaded = load_model(args.cache_dir, rebuild=args.rebuild_cache)
    tensors, meta = build_sample(loaded, text, spec, command)
    out = Path(args.out) if args.out else Path(f"{default_name(text, spec)}.safetensors")
    write_sample(out, tensors, meta)
    log.info("done in %.0f s", time.perf_counter() - start)


def _rows(args: argparse.Namespace, command: str) -> None:
    from ..realdata import indexer_scores, load_sample, save_rows

    sample = load_sample(args.sample)
    logits, kv_lens = indexer_scores(
        sample, next_n=args.next_n, compress_ratio=args.compress_ratio, weights=args.weights
    )
    lengths = np.isfinite(logits).sum(axis=1).astype(np.int32)
    positions = sample.positions[len(sample.positions) - logits.shape[0] :]
    meta = dict(sample.metadata)
    meta.update(
        {
            "format": "gvr-realgen-rows/1",
            "from_sample": sample.name,
            "positions_t": json.dumps([int(p) for p in positions]),
            "lengths": json.dumps([int(x) for x in lengths]),
            "kv_lens": json.dumps([int(x) for x in kv_lens]),
            "next_n": str(args.next_n),
            "row_compress_ratio": str(args.compress_ratio),
            "w_mode": args.weights,
            "rows_generator": command,
        }
    )
    save_rows(args.out, logits, lengths, meta)
    log.info("wrote %s: %d rows x %d", args.out, *logits.shape)


def _stats(args: argparse.Namespace) -> None:
    from ..realdata import indexer_scores, load_sample, load_shared_rows
    from .stats import RECENT_WINDOW, summarize

    source = args.source
    try:
        sample = load_sample(source)
    except (ValueError, KeyError):
        sample = None
    if sample is not None:
        logits, _ = indexer_scores(
            sample, next_n=args.next_n, compress_ratio=args.compress_ratio, weights=args.weights
        )
        lengths = np.isfinite(logits).sum(axis=1)
        ratio = args.compress_ratio
    else:
        logits, lengths, meta = load_shared_rows(source)
        # Rows written by `rows` record their ratio; for other files --compress-ratio says it.
        ratio = int(meta.get("row_compress_ratio", args.compress_ratio))
    for i, props in enumerate(summarize(logits, lengths, window=RECENT_WINDOW // ratio)):
        if args.json:
            print(json.dumps({"row": i, **props}))
        else:
            cells = [
                f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in props.items()
            ]
            print(f"row {i}: " + " ".join(cells))


def main(argv: list[str] | None = None) -> int:
    """Run a command; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    command = "python -m gvr_reference.realgen " + shlex.join(argv)
    if args.command == "generate":
        _generate(args, command)
    elif args.command == "prepare":
        from .model import load_model

        _setup_torch(args.threads)
        load_model(args.cache_dir, rebuild=args.rebuild_cache)
    elif args.command == "verify":
        import torch

        from .capture import verify_layer5
        from .model import load_model
        from .sample import tokenize_prefix
        from .text import load_text

        _setup_torch(args.threads)
        loaded = load_model(args.cache_dir, rebuild=args.rebuild_cache)
        ids, _ = tokenize_prefix(loaded.tokenizer, load_text(args.text).text, args.tokens)
        with torch.inference_mode():
            result = verify_layer5(loaded.model, ids, chunk=args.chunk)
        print(json.dumps(result))
    elif args.command == "rows":
        _rows(args, command)
    elif args.command == "stats":
        _stats(args)
    return 0
