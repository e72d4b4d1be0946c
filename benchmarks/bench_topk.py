"""Side-by-side top-K benchmarks on one GPU: GVR, upstream GVR V2 (FlashInfer ``gvr_2``) and
torch.topk, plus the raw GVR kernel and ``flashinfer.top_k`` on request.

    python benchmarks/bench_topk.py --sets decode-grid,graph,mtp,prefill,real,adversarial,host \
        --out benchmarks/results/h200

The decode grid (``decode-grid``, ``graph``, and the bfloat16 cells of ``half``) is K in
{512, 1024, 2048} x the row lengths of ``--grid-n`` (cells with n <= K left out) x the batches
of ``--grid-b`` (defaults: 4,096-262,144 and 1-512); for
example ``--sets decode-grid,graph --grid-n 6144,8192,12288 --grid-b 1,8,32`` sweeps the
lengths around a routing boundary.

Every provider runs on the same tensors (the same logits, with the same row stride). Each
result is checked exact (order keys against an integer ``torch.topk`` of the keys, see
``gvr_kernels.testing.check_windows``) before it is timed; an inexact result is recorded as
such (``exact: false``, with the number of inexact rows) and not timed. The script exits with
status 1 if a provider that claims exactness (gvr, gvr-raw, torch) returned an inexact row;
the inexact cells of the other providers are listed per input family in the JSON
(``inexact_by_family``) and do not change the exit status. Where a provider's contract does
not cover a cell, the cell gets a record with ``exact: null`` and a ``not applicable: ...``
note, so nothing is skipped silently.

The ``ragged`` set: serving-like decode batches (b in {8, 64, 256}, arenas of 65,536 and
262,144 scores, K 512 and 2048) whose lengths are 80 % short (256-4,096 scores, log-uniform),
15 % mid (4,096 to width / 4) and 5 % long (width / 2 to the width; the last row is the full
width), with ``max_seq_len`` the arena width as engines pass it (``ragged_lengths``); the
``gvr-grouped`` provider times the same rows as uniform batches grouped by length class;
``ragged-graph`` the same batches as CUDA-graph replays.

The ``half`` set: the decode grid with bfloat16 logits (gaussian rows rounded to bf16), plus
float16 rows at n = 262,144, b in {1, 512}; ``half-graph`` the same as CUDA-graph replays. The
``gvr`` provider reads the 16-bit rows in place; ``gvr-fp32`` times GVR on a float32 copy of the
same values (the same answer), ``gvr2-fp32`` gvr_2 on that copy, ``torch`` runs
``torch.topk`` on the 16-bit rows, ``flashinfer-varlen`` FlashInfer's ``top_k_varlen`` with
``backend="auto"`` on the 16-bit rows (recorded as failed where no backend of it runs on the
device). The summary's ``half_vs_fp32`` gives GVR's 16-bit time over its float32 time per cell.

The ``tail`` set: the tie-heavy and narrow-range families of ``gvr_reference.workloads``
(``TAIL_FAMILIES``: constant, two-valued, all equal but a few, all ``-inf`` but fewer than K
finite, within 4 ulps, more than K ``+inf``, 16 levels) beside gaussian rows of the same
shapes (n 131,072 and 262,144, b 1 and 32, every K) in the same run; ``tail-graph`` is the
same cells as CUDA-graph replays. The summary's ``tail_vs_gaussian`` gives each family's time
over the gaussian time of its shape.

Timings: cold L2 (a buffer twice the L2 size is rewritten before every repetition), CUDA
events around the call, median / p10 / p90 of ``--reps`` repetitions; the ``graph`` set times
CUDA-graph replays (one eager call on the capturing stream, then the capture). Before the
first cell a few seconds' worth of bf16 matmuls raise the GPU clocks (``--warmup-s``); the
clocks nvidia-smi reports before and after that warm-up and at the end are kept in
``metadata.clocks``. The clocks are read, never set.

Providers (``--providers``, default ``gvr,gvr2,torch``):
  gvr        the public API (``gvr_dispatch.topk_decode`` / ``topk_prefill`` / ``topk``)
  gvr-width  ``topk_decode`` without ``max_seq_len`` (envelope: the logits width), ``out=``
  gvr-plain  ``topk_decode(logits, kv_lens, k)``: no ``out``, no ``max_seq_len``
  gvr-grouped  the ``ragged`` sets only: the same rows run as uniform batches grouped by length
             class (each group its own call, width and ``max_seq_len``), timed as one sum
  gvr-raw    the compiled kernel called directly with the routed launch (no validation)
  gvr2       FlashInfer's GVR V2 port, hint-free:
             ``top_k_varlen(logits, seq_lens, k, backend="gvr_2", skip_check=True,
             out_indices=out)`` with ``seq_lens`` the rows' valid lengths (int32). It runs on
             decode rows with next_n = 1 and compress_ratio = 1, K in {512, 1024, 2048},
             fp32 logits with a unit inner stride, a row pitch that is a multiple of 4 and
             a 16-byte aligned base; other cells are recorded as not applicable.
             ``skip_check=True`` is FlashInfer's own keyword: it bypasses the library's
             compute-capability gate (gvr_2 is gated to sm_100 and later) and its gvr_2
             problem-size check, whose conditions are checked here instead; the run
             metadata says so.
  torch      ``torch.topk(sorted=False)`` on rows masked to ``-inf`` past their length, indices
             past the length replaced by ``-1`` (the masking is not timed)
  flashinfer ``flashinfer.top_k`` on full rows (only where importable)
  gvr-fp32   (``half`` sets) GVR on a float32 copy of the 16-bit rows (not timed: the copy)
  gvr2-fp32  (``half`` sets) gvr_2 on that float32 copy
  flashinfer-varlen  (``half`` sets) ``top_k_varlen(..., backend="auto")`` on the 16-bit rows
  amax       the read floor: ``torch.amax(logits, dim=1)``, one pass over the same tensor
             (not a top-K: recorded with ``exact: null`` and its time, for the bandwidth
             comparison)

gvr2 on the GPU machine: stage FlashInfer's ``top_k_varlen`` with the CuTe DSL from the
project root, ``bash ../shared/device/stage.sh jit --gvr2``, carry ``.device`` and start the
command with ``source .device/setup.sh``. Without it, gvr2's records say "not importable".
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path

import torch
from gvr_reference.workloads import TAIL_FAMILIES

SETS = (
    "decode-grid", "graph", "mtp", "prefill", "real", "adversarial", "tail", "tail-graph",
    "ragged", "ragged-graph", "host", "half", "half-graph",
)  # fmt: skip
PROVIDERS = (
    "gvr",
    "gvr-width",
    "gvr-plain",
    "gvr-grouped",
    "gvr-raw",
    "gvr2",
    "torch",
    "flashinfer",
    "gvr-fp32",
    "gvr2-fp32",
    "flashinfer-varlen",
    "amax",
)
DEFAULT_PROVIDERS = "gvr,gvr2,torch"
# Providers that promise an exact top-K: one inexact row of theirs fails the run (exit 1).
CLAIMS_EXACT = ("gvr", "gvr-width", "gvr-plain", "gvr-grouped", "gvr-raw", "gvr-fp32", "torch")
# The two GVR entry points compared against gvr_2 (``ratio_vs_gvr2`` = their time / gvr_2's).
GVR_PROVIDERS = ("gvr", "gvr-width", "gvr-plain", "gvr-raw")
GVR2_K = (512, 1024, 2048)
GRID_SETS = ("decode-grid", "graph")
GRID_K = (512, 1024, 2048)
GRID_N = (4096, 16384, 65536, 131072, 262144)
GRID_B = (1, 8, 32, 128, 512)
ADVERSARIAL = (
    "quantized",
    "two_valued",
    "constant",
    "hidden_peaks",
    "position_skew",
    "pos_inf",
    "many_pos_inf",
    "neg_inf",
    "nan",
)


@dataclass
class Case:
    """One benchmark input: logits plus the row windows of the call."""

    set: str
    mode: str  # decode | prefill | dense
    k: int
    logits: torch.Tensor
    starts: torch.Tensor
    lengths: torch.Tensor
    kv_lens: torch.Tensor | None = None
    row_starts: torch.Tensor | None = None
    row_ends: torch.Tensor | None = None
    next_n: int = 1
    cr: int = 1
    family: str = "gaussian"
    max_seq_len: int | None = None
    label: dict = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return int(self.logits.shape[0])


@dataclass
class Record:
    set: str
    provider: str
    timing: str  # eager | graph | host
    k: int
    rows: int
    n: int
    next_n: int
    compress_ratio: int
    family: str
    exact: bool | None
    dtype: str = "float32"
    median_us: float | None = None
    p10_us: float | None = None
    p90_us: float | None = None
    gbps: float | None = None
    speedup_vs_torch: float | None = None
    ratio_vs_gvr2: float | None = None  # this provider's time / gvr_2's (gvr, gvr-raw only)
    note: str = ""


# ----------------------------------------------------------------------------- providers
def gvr_call(case: Case, out: torch.Tensor):
    import gvr_dispatch as gvr

    if case.mode == "decode":
        return lambda: gvr.topk_decode(
            case.logits,
            case.kv_lens,
            case.k,
            next_n=case.next_n,
            compress_ratio=case.cr,
            out=out,
            max_seq_len=case.max_seq_len,
        )
    if case.mode == "prefill":
        return lambda: gvr.topk_prefill(
            case.logits, case.row_starts, case.row_ends, case.k, out=out
        )
    return lambda: gvr.topk(case.logits, case.k, out=out)


def gvr_width_call(case: Case, out: torch.Tensor):
    """``topk_decode`` without ``max_seq_len`` (the envelope is the logits width), into
    ``out``; other modes as :func:`gvr_call`."""
    import gvr_dispatch as gvr

    if case.mode != "decode":
        return gvr_call(case, out)
    return lambda: gvr.topk_decode(
        case.logits, case.kv_lens, case.k, next_n=case.next_n, compress_ratio=case.cr, out=out
    )


def gvr_plain_call(case: Case, out: torch.Tensor):
    """The call users write first: ``topk_decode(logits, kv_lens, k)`` (no ``out``, no
    ``max_seq_len``); the result is copied into ``out`` outside the timing."""
    import gvr_dispatch as gvr

    if case.mode != "decode":
        return "decode calls only"

    def run():
        return gvr.topk_decode(
            case.logits, case.kv_lens, case.k, next_n=case.next_n, compress_ratio=case.cr
        )

    return run, out.copy_


def gvr_raw_call(case: Case, out: torch.Tensor):
    """The routed compiled kernel called directly: what the public API adds on top of it is
    validation and the launch-cache lookup."""
    from gvr_kernels.abi import KernelArgs
    from gvr_kernels.routing import route_static

    n_env = case.max_seq_len // case.cr if case.max_seq_len else case.logits.shape[1]
    mode = {"decode": "decode", "prefill": "prefill", "dense": "full"}[case.mode]
    route = route_static(
        _spec(), rows=case.rows, n_env=min(n_env, case.logits.shape[1]), k=case.k, mode=mode
    )
    cfg = route.config
    fn = _aot_kernels().get(cfg)
    if fn is None:
        from gvr_kernels.compile import compile_config

        fn = compile_config(cfg)
    dev = case.logits.device
    ws = torch.zeros(max(route.workspace_words, 4), dtype=torch.int32, device=dev).view(
        torch.uint32
    )
    dummy = torch.zeros(1, dtype=torch.int32, device=dev)
    val = torch.zeros((1, 1), dtype=torch.float32, device=dev)
    a = case.kv_lens if case.mode == "decode" else case.row_starts
    b = case.row_ends if case.mode == "prefill" else None
    args = KernelArgs(
        logits=case.logits,
        lens_a=dummy if a is None else a,
        lens_b=dummy if b is None else b,
        out=out,
        values=val,
        workspace=ws,
        paths=dummy,
        k=case.k,
        next_n=case.next_n,
        cr_shift=int(math.log2(case.cr)),
        parts=route.parts,
        block_max=val,
    )
    return lambda: fn(*args)


_AOT: dict | None = None


def _spec():
    """The device as routing sees it (read from torch, so no dispatcher is needed)."""
    from gvr_kernels.spec import spec_from_properties

    return spec_from_properties(torch.cuda.get_device_properties(0))


def _aot_kernels() -> dict:
    """Kernels exported ahead of time (``GVR_AOT_DIR``), for runs without the DSL compiler."""
    global _AOT
    if _AOT is None:
        from gvr_kernels.aot import load_library

        folder = os.environ.get("GVR_AOT_DIR")
        _AOT = load_library(folder) if folder else {}
    return _AOT


def masked_logits(case: Case) -> torch.Tensor:
    """Rows as ``torch.topk`` users feed them: a contiguous copy of each row's window, padded
    with ``-inf``."""
    w = max(int(case.lengths.max()), case.k)
    pos = torch.arange(w, device=case.logits.device)
    cols = (case.starts[:, None] + pos[None, :]).clamp(max=case.logits.shape[1] - 1)
    x = torch.gather(case.logits, 1, cols)
    return x.masked_fill(pos[None, :] >= case.lengths[:, None], -math.inf).contiguous()


def torch_call(case: Case, out: torch.Tensor):
    x = masked_logits(case)
    lengths = case.lengths[:, None]

    def run():
        return torch.topk(x, case.k, dim=1, sorted=False)

    def finish(res):
        idx = res.indices
        out.copy_(torch.where(idx < lengths, idx, torch.full_like(idx, -1)).to(torch.int32))

    return run, finish


def flashinfer_call(case: Case, out: torch.Tensor):
    from flashinfer import top_k  # optional; ImportError when absent or trimmed away

    if case.mode != "dense" and not bool((case.lengths == case.logits.shape[1]).all()):
        return "rows shorter than the logits width (flashinfer.top_k ranks whole rows)"
    x = case.logits.contiguous()

    def run():
        return top_k(x, case.k)

    def finish(res):
        out.copy_(res[1].to(torch.int32))

    return run, finish


def gvr2_layout_problem(logits: torch.Tensor) -> str | None:
    """Why gvr_2 cannot address ``logits`` in place, or None.

    gvr_2 loads rows as float4 vectors: it needs a unit inner stride, a row pitch (the row
    stride, or the width for a single row) that is a multiple of 4 and not below the width,
    and a 16-byte aligned base. A padded allocation viewed as ``[:, :width]`` qualifies
    (its pitch is the allocation's width); the benchmark never copies rows to make a case
    fit, since gvr_2 would then read other memory than the other providers."""
    if logits.dim() != 2:
        return f"logits of {logits.dim()} dimensions"
    if logits.dtype != torch.float32:
        return f"{str(logits.dtype).removeprefix('torch.')} logits (gvr_2 takes fp32)"
    rows, width = logits.shape
    if logits.stride(1) != 1:
        return f"inner stride {logits.stride(1)} (gvr_2 needs unit-stride rows)"
    pitch = logits.stride(0) if rows > 1 else width
    if rows > 1 and pitch < width:
        return f"overlapping rows (row stride {pitch} < width {width})"
    if pitch % 4:
        return f"row pitch {pitch} not a multiple of 4 (gvr_2 loads float4 vectors)"
    if logits.data_ptr() % 16:
        return "logits base not 16-byte aligned"
    return None


def gvr2_not_applicable(case: Case) -> str | None:
    """Why the benchmark does not run gvr_2 on ``case``, or None where it does.

    The benchmark runs gvr_2 where its contract and this benchmark's cases meet: decode rows
    that start at column 0 with one valid length per row (next_n = 1, compress_ratio = 1, so
    ``seq_lens`` is the valid length itself), or dense rows (``seq_lens`` = width)."""
    if case.mode == "prefill":
        return "prefill windows (gvr_2 takes decode rows: one length per row, from column 0)"
    if case.mode == "decode" and (case.next_n != 1 or case.cr != 1):
        return (
            f"next_n = {case.next_n}, compress_ratio = {case.cr} (gvr_2 is run on "
            "next_n = 1, compress_ratio = 1 rows here)"
        )
    if case.k not in GVR2_K:
        return f"K = {case.k} (gvr_2 takes K in {{512, 1024, 2048}})"
    if case.rows and bool((case.starts != 0).any()):
        return "windows that do not start at column 0"
    return gvr2_layout_problem(case.logits)


def gvr2_seq_lens(case: Case) -> torch.Tensor:
    """gvr_2's ``seq_lens``: one int32 per row, the row's valid length (next_n = 1 and
    compress_ratio = 1, so FlashInfer's ``(seq_len - next_n + t + 1) // compress_ratio``
    is the length itself); the logits width for dense rows."""
    if case.mode == "dense":
        return torch.full(
            (case.rows,), case.logits.shape[1], dtype=torch.int32, device=case.logits.device
        )
    return case.lengths.to(torch.int32).contiguous()


def gvr2_call(case: Case, out: torch.Tensor):
    """FlashInfer's gvr_2, hint-free, writing into ``out`` (contiguous int32 [rows, k], as
    ``out_indices`` requires). ``skip_check=True``: see the module docstring."""
    from flashinfer.topk_varlen.topk_varlen import top_k_varlen

    why = gvr2_not_applicable(case)
    if why is not None:
        return why
    seq_lens = gvr2_seq_lens(case)
    logits, k = case.logits, case.k

    def run():
        return top_k_varlen(logits, seq_lens, k, backend="gvr_2", skip_check=True, out_indices=out)

    return run, None


def widened(case: Case) -> Case:
    """The case with its 16-bit logits copied into float32 (exact, order kept; the copy's rows
    are padded to a multiple of 4): the same answer, for the float32 providers."""
    x = case.logits
    pitch = -(-x.shape[1] // 4) * 4
    buf = torch.empty((x.shape[0], pitch), dtype=torch.float32, device=x.device)
    view = buf[:, : x.shape[1]]
    view.copy_(x)
    return Case(**{**case.__dict__, "logits": view})


def gvr_fp32_call(case: Case, out: torch.Tensor):
    if case.logits.dtype == torch.float32:
        return "float32 logits (this provider times the float32 copy of 16-bit rows)"
    return gvr_call(widened(case), out), None


def gvr2_fp32_call(case: Case, out: torch.Tensor):
    if case.logits.dtype == torch.float32:
        return "float32 logits (this provider times the float32 copy of 16-bit rows)"
    return gvr2_call(widened(case), out)


def flashinfer_varlen_call(case: Case, out: torch.Tensor):
    """FlashInfer's ``top_k_varlen`` with its own backend choice (``"auto"``) on the rows as
    they are (16-bit included), without ``skip_check``: whatever FlashInfer runs here."""
    from flashinfer.topk_varlen.topk_varlen import top_k_varlen

    if case.mode != "decode" or case.next_n != 1 or case.cr != 1:
        return "decode rows with next_n = 1 and compress_ratio = 1 only"
    seq_lens = gvr2_seq_lens(case)
    logits, k = case.logits, case.k

    def run():
        return top_k_varlen(logits, seq_lens, k, backend="auto", out_indices=out)

    return run, None


def flashinfer_version() -> str | None:
    """FlashInfer's version where it imports (the staged trimmed package has no top-level
    ``__init__``, so ``flashinfer.__version__`` may be absent)."""
    try:
        import flashinfer
    except ImportError:
        return None
    version = getattr(flashinfer, "__version__", None)
    if version is None:
        try:
            from flashinfer.version import __version__ as version
        except ImportError:
            version = None
    if version is None:
        try:
            from importlib.metadata import version as dist_version

            version = dist_version("flashinfer-python")
        except Exception:
            version = None
    return version


def make_call(name: str, case: Case, out: torch.Tensor):
    """``(fn, finish)`` for a provider, or a string saying why it does not apply to ``case``.
    ``fn()`` is what gets timed; ``finish(fn())`` (untimed, may be None) moves the result
    into ``out``. Raises ImportError when the provider's package is missing."""
    if name == "gvr":
        return gvr_call(case, out), None
    if name == "gvr-width":
        return gvr_width_call(case, out), None
    if name == "gvr-plain":
        return gvr_plain_call(case, out)
    if name == "gvr-grouped":
        return gvr_grouped_call(case, out)
    if name == "gvr-raw":
        return gvr_raw_call(case, out), None
    if name == "torch":
        return torch_call(case, out)
    if name == "gvr2":
        return gvr2_call(case, out)
    if name == "flashinfer":
        return flashinfer_call(case, out)
    if name == "gvr-fp32":
        return gvr_fp32_call(case, out)
    if name == "gvr2-fp32":
        return gvr2_fp32_call(case, out)
    if name == "flashinfer-varlen":
        return flashinfer_varlen_call(case, out)
    if name == "amax":
        if case.set == "host":
            return "a read floor, not a call path"
        return (lambda: torch.amax(case.logits, dim=1)), None
    raise ValueError(f"unknown provider {name!r}")


# ----------------------------------------------------------------------------- timing
class Timer:
    def __init__(self, reps: int):
        props = torch.cuda.get_device_properties(0)
        l2 = getattr(props, "L2_cache_size", 64 << 20)
        self.flush = torch.empty(max(2 * l2, 256 << 20), dtype=torch.uint8, device="cuda")
        self.reps = reps
        self.capture_stream = None

    def cold(self, fn, prepare=None, then=None) -> tuple[float, float, float]:
        """Median, 10th and 90th percentile (us) of ``reps`` CUDA-event timings of ``fn``,
        the L2 flushed before each; ``prepare`` runs before the flush and ``then`` after it,
        both untimed (``tools/cold_code.py``)."""
        times = []
        for _ in range(self.reps):
            if prepare is not None:
                prepare()
            self.flush.zero_()
            if then is not None:
                then()
            s = torch.cuda.Event(enable_timing=True)
            e = torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e) * 1e3)
        q = statistics.quantiles(times, n=10)
        return statistics.median(times), q[0], q[-1]

    def graph(self, fn) -> tuple[float, float, float]:
        """Cold-L2 timing of CUDA-graph replays of ``fn``.

        ``fn`` runs once eagerly on the stream that then captures it: gvr_2 makes its
        workspace slab on the first eager launch of a stream and refuses to allocate it under
        capture, and a first call also compiles or loads whatever a provider builds lazily.
        One capture stream is kept for the whole run (gvr_2 keeps one slab per stream)."""
        return self.cold(self.capture(fn))

    def capture(self, fn):
        """The replay of a CUDA graph of ``fn``, captured as :meth:`graph` describes."""
        if self.capture_stream is None:
            self.capture_stream = torch.cuda.Stream()
        side = self.capture_stream
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
        side.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=side):
            fn()
        torch.cuda.current_stream().wait_stream(side)
        return g.replay


# ----------------------------------------------------------------------------- cases
def decode_case(
    set_name, k, b, width, g, *, next_n=1, cr=1, family="gaussian", full=True, dtype=None
):
    from gvr_kernels.testing import families

    rows = b * next_n
    vec = 4 if dtype in (None, torch.float32) else 8
    alloc = -(-width // vec) * vec
    logits = families(family, rows, alloc, k, g)
    if dtype not in (None, torch.float32):
        logits = logits.to(dtype)  # rounded to the 16-bit format, rows padded to 8
    logits = logits[:, :width]
    if full:
        kv = torch.full((b,), width * cr + next_n - 1, dtype=torch.int32, device="cuda")
    else:
        kv = torch.randint(
            width * cr // 2,
            width * cr + next_n,
            (b,),
            generator=g,
            device="cuda",
            dtype=torch.int32,
        )
    r = torch.arange(rows, device="cuda")
    lengths = (
        (kv.to(torch.int64)[r // next_n] - next_n + r % next_n + 1).clamp(min=0) // cr
    ).clamp(max=width)
    return Case(
        set_name,
        "decode",
        k,
        logits,
        torch.zeros_like(lengths),
        lengths,
        kv_lens=kv,
        next_n=next_n,
        cr=cr,
        family=family,
        max_seq_len=width * cr + next_n - 1,
    )


def prefill_case(set_name, k, rows, ctx, g):
    """A causal prefill chunk: row i sees ``[0, ctx - rows + i + 1)`` of its sequence; rows of
    two sequences share the logits width (starts at 0 and at ``ctx // 2``)."""
    from gvr_kernels.testing import families

    width = -(-ctx // 4) * 4
    logits = families("gaussian", rows, width, k, g)
    i = torch.arange(rows, device="cuda")
    starts = torch.where(i % 2 == 0, 0, 3).to(torch.int64)
    ends = torch.clamp(ctx - rows + i + 1, min=0)
    ends = torch.maximum(ends, starts)
    return Case(
        set_name,
        "prefill",
        k,
        logits,
        starts,
        ends - starts,
        row_starts=starts.to(torch.int32),
        row_ends=ends.to(torch.int32),
    )


def real_cases(k, args):
    """Real indexer rows: the shared Gemma-3 rows when a folder is given, else the committed
    sample's scores."""
    cases = []
    folder = Path(args.real_rows) if args.real_rows else None
    if folder and folder.is_dir():
        from safetensors.torch import load_file

        for f in sorted(folder.glob("*.safetensors")):
            d = load_file(str(f))
            logits = d["logits"].cuda()
            lengths = d["lengths"].to(torch.int64).cuda()
            width = logits.shape[1]
            if width % 4:
                continue
            rows = logits.shape[0]
            kv = d["lengths"].to(torch.int32).cuda()
            cases.append(
                Case(
                    "real",
                    "decode",
                    k,
                    logits,
                    torch.zeros_like(lengths),
                    lengths,
                    kv_lens=kv,
                    family=f.stem,
                    max_seq_len=width,
                    label={"file": f.name, "rows": rows},
                )
            )
    else:
        from gvr_reference.realdata import indexer_scores, load_sample

        s = load_sample()
        logits, kv = indexer_scores(s, s.positions, next_n=1, compress_ratio=1)
        lg = torch.from_numpy(logits).cuda()
        kvt = torch.from_numpy(kv).cuda()
        lengths = kvt.to(torch.int64)
        cases.append(
            Case(
                "real",
                "decode",
                k,
                lg,
                torch.zeros_like(lengths),
                lengths,
                kv_lens=kvt,
                family="sample",
                max_seq_len=lg.shape[1],
            )
        )
    return cases


#: The ragged sets (eager, CUDA-graph replay) ...
RAGGED_SETS = ("ragged", "ragged-graph")
#: ... their arena widths and batch sizes.
RAGGED_WIDTHS = (65536, 262144)
RAGGED_B = (8, 64, 256)
#: Its length classes, as fractions of the rows: (fraction, low, high), lengths log-uniform in
#: [low, high) (bounds above 1 are scores, at most 1 a fraction of the width).
RAGGED_CLASSES = ((0.80, 256, 4096), (0.15, 4096, 0.25), (0.05, 0.5, 1.0))


def ragged_lengths(b: int, width: int, seed: int = 0):
    """Serving-like decode lengths for a batch of ``b`` rows in an arena of ``width``: 80 % short
    (256-4,096 scores, log-uniform), 15 % mid (4,096 to width / 4), 5 % long (width / 2 to the
    width), at least one long row and the last row the full width, shuffled (numpy int64).
    In arenas narrower than 16,384 scores each class's bounds are clamped into
    ``[its low bound, width]`` (the mid class is then rows of ``min(4,096, width)`` scores)."""
    import numpy as np

    rng = np.random.default_rng([seed, b, width])
    counts = [round(b * f) for f, _, _ in RAGGED_CLASSES[1:]]
    counts[1] = max(counts[1], 1)
    counts.insert(0, b - sum(counts))
    parts = []
    for count, (_, lo, hi) in zip(counts, RAGGED_CLASSES, strict=True):
        lo = min(lo if lo > 1 else lo * width, width)
        hi = min(max(hi if hi > 1 else hi * width, lo), width)
        parts.append(np.exp(rng.uniform(np.log(lo), np.log(hi), count)))
    lengths = np.minimum(np.concatenate(parts).astype(np.int64), width)
    lengths = rng.permutation(lengths)
    lengths[-1] = width
    return lengths


def ragged_groups(lengths, width: int):
    """Row indices of the ragged batch by length class (the uniform batches it is compared
    with): each row in exactly one group, groups in class order, empty groups left out."""
    import numpy as np

    lengths = np.asarray(lengths)
    bounds = [0, 4096, max(width // 4, 4096), width + 1]
    groups = []
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        idx = np.nonzero((lengths > lo) & (lengths <= hi))[0]
        if idx.size:
            groups.append(idx)
    return groups


def ragged_case(k, b, width, g, seed=0, set_name="ragged"):
    """A ragged decode batch (:func:`ragged_lengths`) of gaussian rows in a ``width`` arena;
    ``max_seq_len`` is the arena width, as an engine passes it (``set_name``: ``"ragged"``,
    or ``"ragged-graph"`` for CUDA-graph replay)."""
    from gvr_kernels.testing import families

    lengths = torch.from_numpy(ragged_lengths(b, width, seed)).cuda()
    logits = families("gaussian", b, width, k, g)
    return Case(
        set_name,
        "decode",
        k,
        logits,
        torch.zeros_like(lengths),
        lengths,
        kv_lens=lengths.to(torch.int32),
        family="ragged",
        max_seq_len=width,
    )


def gvr_grouped_call(case: Case, out: torch.Tensor):
    """The rows of a ragged case run as uniform batches grouped by length class: each group a
    contiguous copy of its rows, its width and ``max_seq_len`` the group's longest row (rounded
    up to 4); the timed call runs every group, ``finish`` scatters the answers into ``out``."""
    import gvr_dispatch as gvr

    if case.set not in RAGGED_SETS:
        return "ragged sets only"
    lengths = case.lengths.cpu().numpy()
    groups = []
    for idx in ragged_groups(lengths, case.logits.shape[1]):
        longest = int(lengths[idx].max())
        w = -(-longest // 4) * 4
        rows = torch.from_numpy(idx).to(case.logits.device)
        x = case.logits.index_select(0, rows)[:, :w].contiguous()
        kv = case.kv_lens.index_select(0, rows)
        o = torch.empty((idx.size, case.k), dtype=torch.int32, device=x.device)
        groups.append((rows, x, kv, o, longest))

    def run():
        for _, x, kv, o, longest in groups:
            gvr.topk_decode(x, kv, case.k, out=o, max_seq_len=longest)

    def finish(_):
        for rows, _, _, o, _ in groups:
            out.index_copy_(0, rows, o)

    return run, finish


def grid_shape(set_name: str, args) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """``(ks, ns, batches)`` of a grid set (``decode-grid``, ``graph``, ``half``,
    ``half-graph``, ``host``): ``--grid-n`` / ``--grid-b``, or with ``--quick`` (which leaves
    them None) a few cells. ``host`` is always n = 4,096 at b = 1 (``--quick`` included); the
    half sets' float16 cells (n = 262,144, b 1 and 512) are not part of this grid."""
    if set_name == "host":
        return (512, 2048), (4096,), (1,)
    quick_b = (1, 512) if set_name.startswith("half") else (1, 128)
    return GRID_K, args.grid_n or (16384, 262144), args.grid_b or quick_b


def build_cases(set_name: str, g, args):
    if set_name in ("decode-grid", "graph", "host"):
        ks, ns, bs = grid_shape(set_name, args)
        for k in ks:
            for n in ns:
                if n <= k:
                    continue
                for b in bs:
                    yield decode_case(set_name, k, b, n, g)
    elif set_name == "mtp":
        for k in (512, 2048):
            for next_n in (2, 4):
                for cr in (1, 4):
                    for b in (1, 32, 128):
                        width = 262144 // cr
                        if width <= k:
                            continue
                        yield decode_case("mtp", k, b, width, g, next_n=next_n, cr=cr, full=False)
    elif set_name == "prefill":
        for k in (512, 2048):
            for rows, ctx in ((128, 16384), (1024, 16384), (1024, 65536), (4096, 32768)):
                yield prefill_case("prefill", k, rows, ctx, g)
    elif set_name == "real":
        for k in GRID_K:
            yield from real_cases(k, args)
    elif set_name == "adversarial":
        for k in (512, 2048):
            for fam in ADVERSARIAL:
                for n in (131072, 262144):
                    for b in (1, 32):
                        yield decode_case("adversarial", k, b, n, g, family=fam)
    elif set_name in ("tail", "tail-graph"):
        # The tie-heavy and narrow-range families beside gaussian rows of the same shapes.
        for k in GRID_K:
            for fam in ("gaussian",) + TAIL_FAMILIES:
                for n in (131072, 262144):
                    for b in (1, 32):
                        yield decode_case(set_name, k, b, n, g, family=fam)
    elif set_name in RAGGED_SETS:
        for k in (512, 2048):
            for width in args.ragged_widths or RAGGED_WIDTHS:
                for b in args.ragged_b or RAGGED_B:
                    yield ragged_case(k, b, width, g, seed=args.seed, set_name=set_name)
    elif set_name in ("half", "half-graph"):
        _, ns, bs = grid_shape(set_name, args)
        for k in GRID_K:
            for n in ns:
                if n <= k:
                    continue
                for b in bs:
                    yield decode_case(set_name, k, b, n, g, dtype=torch.bfloat16)
        for k in GRID_K:
            for b in (1, 512):
                yield decode_case(set_name, k, b, 262144, g, dtype=torch.float16)


# ----------------------------------------------------------------------------- running
def bytes_read(case: Case) -> int:
    return int(case.lengths.sum()) * case.logits.element_size()


def case_timing(case: Case) -> str:
    graph = ("graph", "tail-graph", "half-graph", "ragged-graph")
    return "graph" if case.set in graph else {"host": "host"}.get(case.set, "eager")


def _short(exc: BaseException) -> str:
    """An exception as one line of at most 240 characters, for a record's note."""
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()[0]
    return text if len(text) <= 240 else text[:237] + "..."


def run_case(case: Case, timer: Timer, providers, records):
    """Check and time every provider on ``case``; append their records to ``records``."""
    from gvr_kernels.testing import check_windows

    n = int(case.lengths.max()) if case.rows else 0
    timing = case_timing(case)
    dev = case.logits.device
    mine: list[Record] = []
    for name in providers:
        if case.set == "host" and name not in (*GVR_PROVIDERS, "torch"):
            continue
        out = torch.full((case.rows, case.k), 0x7FFFFFFF, dtype=torch.int32, device=dev)
        base = dict(
            set=case.set,
            provider=name,
            timing=timing,
            k=case.k,
            rows=case.rows,
            n=n,
            next_n=case.next_n,
            compress_ratio=case.cr,
            family=case.family,
            dtype=str(case.logits.dtype).removeprefix("torch."),
        )
        claims = name in CLAIMS_EXACT
        try:
            made = make_call(name, case, out)
        except ImportError as exc:
            mine.append(Record(exact=None, note=f"not importable: {exc}", **base))
            continue
        except Exception as exc:
            if claims:
                raise
            mine.append(Record(exact=None, note=f"failed: {_short(exc)}", **base))
            continue
        if isinstance(made, str):
            mine.append(Record(exact=None, note=f"not applicable: {made}", **base))
            continue
        fn, finish = made
        try:
            res = fn()
            if finish is not None:
                finish(res)
            if dev.type == "cuda":
                torch.cuda.synchronize()
        except Exception as exc:
            if claims:
                raise
            mine.append(Record(exact=None, note=f"failed: {_short(exc)}", **base))
            continue
        bad = 0
        if name != "amax":  # the read floor returns no top-K
            ok = check_windows(case.logits, case.starts, case.lengths, case.k, out)
            bad = int((~ok).sum())
        if bad:
            note = f"inexact: {bad} of {case.rows} rows; not timed"
            mine.append(Record(exact=False, note=note, **base))
            continue
        if timing == "host":
            mine.append(host_record(fn, base))
            continue
        try:
            med, p10, p90 = timer.graph(fn) if timing == "graph" else timer.cold(fn)
        except Exception as exc:  # a provider that cannot be captured
            mine.append(Record(exact=True, note=f"not timed: {_short(exc)}", **base))
            continue
        mine.append(
            Record(
                exact=None if name == "amax" else True,
                note="read floor: one pass over the logits, not a top-K" if name == "amax" else "",
                median_us=med,
                p10_us=p10,
                p90_us=p90,
                gbps=bytes_read(case) / (med * 1e3),
                **base,
            )
        )
    attach_ratios(mine)
    records.extend(mine)


def attach_ratios(cell: list[Record]) -> None:
    """Fill ``speedup_vs_torch`` (torch's time / this one) on every timed record of one cell and
    ``ratio_vs_gvr2`` (this time / gvr_2's) on the timed gvr and gvr-raw records, where the
    reference of the same timing was timed."""
    torch_us = {r.timing: r.median_us for r in cell if r.provider == "torch" and r.median_us}
    gvr2_us = {r.timing: r.median_us for r in cell if r.provider == "gvr2" and r.median_us}
    for r in cell:
        if not r.median_us:
            continue
        if r.timing in torch_us:
            r.speedup_vs_torch = torch_us[r.timing] / r.median_us
        if r.provider in GVR_PROVIDERS and r.timing in gvr2_us:
            r.ratio_vs_gvr2 = r.median_us / gvr2_us[r.timing]


def host_record(fn, base, batches: int = 7, calls: int = 100) -> Record:
    """Host time per eager call: wall clock of back-to-back calls (``batches`` batches of
    ``calls``, each followed by a synchronisation); the median of the batch means, with p10 /
    p90 over the batches (the host's own noise)."""
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    means = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        means.append((t1 - t0) / calls * 1e6)
    means.sort()
    return Record(
        exact=True,
        median_us=statistics.median(means),
        p10_us=means[0],
        p90_us=means[-1],
        note=f"host time per call ({batches} x {calls} calls; p10/p90: min/max batch)",
        **base,
    )


# ----------------------------------------------------------------------------- clocks
SMI_CLOCK_FIELDS = ("clocks.sm", "clocks.mem", "clocks.max.sm", "power.draw", "temperature.gpu")
CLOCK_KEYS = ("sm_mhz", "mem_mhz", "max_sm_mhz", "power_w", "temp_c")


def _gpu_uuid() -> str | None:
    try:
        uuid = str(torch.cuda.get_device_properties(0).uuid)
    except Exception:
        return None
    return uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"


def _smi(query: str) -> str | None:
    """The first line nvidia-smi prints for ``--query-gpu=query`` about this GPU (selected by
    its UUID where torch reports one, else the first GPU listed); None where nvidia-smi is
    missing or fails. Read-only: nothing here changes a clock."""
    base = ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"]
    uuid = _gpu_uuid()
    attempts = ([base + ["-i", uuid]] if uuid else []) + [base]
    for cmd in attempts:
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.SubprocessError):
            return None
        lines = [ln.strip() for ln in res.stdout.splitlines() if ln.strip()]
        if res.returncode == 0 and lines:
            return lines[0]
    return None


def parse_clocks(line: str) -> dict:
    """One ``nvidia-smi --query-gpu=clocks.sm,clocks.mem,clocks.max.sm,power.draw,
    temperature.gpu --format=csv,noheader`` line as numbers (None for "[N/A]" and the like)."""
    out: dict = {"raw": line}
    parts = [p.strip() for p in line.split(",")]
    for i, key in enumerate(CLOCK_KEYS):
        word = parts[i].split()[0] if i < len(parts) and parts[i] else ""
        try:
            out[key] = float(word)
        except ValueError:
            out[key] = None
    return out


def read_clocks(stage: str) -> dict:
    rec = {
        "stage": stage,
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    line = _smi(",".join(SMI_CLOCK_FIELDS))
    if line is None:
        rec["error"] = "nvidia-smi not available"
    else:
        rec.update(parse_clocks(line))
    return rec


def warm_up(seconds: float, size: int = 8192) -> dict:
    """Raise the GPU clocks before timing: back-to-back bf16 ``size``-cubed matmuls of random
    data (zeros would draw less power) for ``seconds`` of wall time, at least 100 of them."""
    if seconds <= 0:
        return {"matmuls": 0, "seconds": 0.0}
    g = torch.Generator(device="cuda").manual_seed(12345)
    a = torch.randn(size, size, generator=g, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(size, size, generator=g, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    count = 0
    while count < 100 or time.perf_counter() - t0 < seconds:
        for _ in range(25):
            torch.matmul(a, b, out=c)
        count += 25
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    del a, b, c
    return {
        "matmuls": count,
        "seconds": elapsed,
        "shape": [size, size, size],
        "dtype": "bfloat16",
        "tflops": 2.0 * size**3 * count / elapsed / 1e12,
    }


# ----------------------------------------------------------------------------- metadata
def gvr2_note(version: str | None, device: str, major: int, minor: int) -> str:
    arch = f"sm_{major}{minor}" + ("a" if major >= 9 else "")
    return (
        f"gvr2 is FlashInfer {version}'s gvr_2 backend, called hint-free as "
        "top_k_varlen(logits, seq_lens, k, backend='gvr_2', skip_check=True, "
        "out_indices=out) with seq_lens the rows' valid lengths (int32). skip_check=True is "
        "FlashInfer's own keyword: it bypasses the library's compute-capability gate (gvr_2 "
        f"is gated to sm_100 and later) and its gvr_2 problem-size check, so on this {device} "
        f"(compute capability {major}.{minor}, {arch}) gvr_2 runs outside the devices "
        "FlashInfer enables it for; no FlashInfer source is changed. The benchmark applies "
        "that check's conditions itself (fp32 logits, K in {512, 1024, 2048}, unit inner "
        "stride, row pitch a multiple of 4, 16-byte aligned base) and records other cells as "
        "not applicable."
    )


def metadata(providers=(), clocks=None, warmup=None) -> dict:
    props = torch.cuda.get_device_properties(0)
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": props.name,
        "sm_count": props.multi_processor_count,
        "compute_capability": f"{props.major}.{props.minor}",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
    }
    meta["driver"] = _smi("driver_version")
    try:
        import cutlass

        meta["cutlass_dsl"] = getattr(cutlass, "__version__", None)
    except ImportError:
        meta["cutlass_dsl"] = None
    meta["flashinfer"] = flashinfer_version()
    commit = os.environ.get("GVR_COMMIT")
    if not commit:
        try:
            commit = (
                subprocess.run(
                    ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
                ).stdout.strip()
                or None
            )
        except (OSError, subprocess.SubprocessError):
            commit = None
    meta["commit"] = commit
    meta["providers"] = list(providers)
    meta["claims_exact"] = [p for p in providers if p in CLAIMS_EXACT]
    meta["clocks"] = list(clocks or [])
    meta["warmup"] = warmup
    notes = []
    if "gvr2" in providers:
        notes.append(gvr2_note(meta["flashinfer"], props.name, props.major, props.minor))
    meta["notes"] = notes
    return meta


# ----------------------------------------------------------------------------- reports
def _as_dict(r) -> dict:
    return asdict(r) if is_dataclass(r) else r


def cell_key(r: dict) -> tuple:
    """What identifies one benchmark cell (all providers of one case share it)."""
    return (
        r["set"],
        r["timing"],
        r["k"],
        r["rows"],
        r["n"],
        r["next_n"],
        r["compress_ratio"],
        r["family"],
        r.get("dtype", "float32"),
    )


def group_cells(records) -> dict:
    """``{cell_key: {provider: record dict}}`` in the order the cells were run."""
    cells: dict = {}
    for r in map(_as_dict, records):
        cells.setdefault(cell_key(r), {})[r["provider"]] = r
    return cells


def geomean(xs) -> float:
    xs = list(xs)
    return math.exp(math.fsum(map(math.log, xs)) / len(xs))


def _speedups(sp: list[float]) -> dict:
    return {
        "cells": len(sp),
        "geomean_speedup": geomean(sp),
        "min_speedup": min(sp),
        "max_speedup": max(sp),
    }


def _cell_id(r: dict) -> dict:
    out = {"k": r["k"], "rows": r["rows"], "n": r["n"], "family": r["family"]}
    if r["next_n"] != 1 or r["compress_ratio"] != 1:
        out.update(next_n=r["next_n"], compress_ratio=r["compress_ratio"])
    return out


def ratio_block(recs: list[dict], cells: bool = True) -> dict:
    """GVR time / gvr_2 time over ``recs`` (records carrying ``ratio_vs_gvr2``): geomean, how
    many cells GVR is faster in (ratio < 1), the best (smallest) and worst (largest) ratio."""
    rs = [r["ratio_vs_gvr2"] for r in recs]
    best = min(recs, key=lambda r: r["ratio_vs_gvr2"])
    worst = max(recs, key=lambda r: r["ratio_vs_gvr2"])
    out = {
        "cells": len(rs),
        "geomean_ratio": geomean(rs),
        "gvr_faster_cells": sum(x < 1.0 for x in rs),
        "best_ratio": best["ratio_vs_gvr2"],
        "worst_ratio": worst["ratio_vs_gvr2"],
    }
    if cells:
        out["best_cell"] = _cell_id(best)
        out["worst_cell"] = _cell_id(worst)
    return out


LABELS = {
    "gvr": "GVR",
    "gvr-width": "GVR (no max_seq_len)",
    "gvr-plain": "GVR (no out, no max_seq_len)",
    "gvr-grouped": "GVR (rows grouped by length)",
    "gvr-raw": "GVR (raw kernel)",
    "gvr2": "gvr_2",
    "torch": "torch.topk",
    "flashinfer": "flashinfer.top_k",
    "gvr-fp32": "GVR on a float32 copy",
    "gvr2-fp32": "gvr_2 on a float32 copy",
    "flashinfer-varlen": "flashinfer top_k_varlen (auto)",
    "amax": "one read pass (torch.amax)",
}
assert set(LABELS) == set(PROVIDERS), "every provider has a label"


def ratio_headline(provider: str, block: dict) -> str:
    """E.g. "GVR takes 1.30x gvr_2's time (geomean; faster in 5 of 75 cells): 1.54x at b = 1,
    ..." (the per-batch part only where ``block`` has ``by_batch``)."""
    text = (
        f"{LABELS[provider]} takes {block['geomean_ratio']:.2f}x gvr_2's time (geomean; faster "
        f"in {block['gvr_faster_cells']} of {block['cells']} cells; "
        f"{block['best_ratio']:.2f}x to {block['worst_ratio']:.2f}x)"
    )
    by_batch = block.get("by_batch")
    if by_batch:
        text += ": " + ", ".join(
            f"{v['geomean_ratio']:.2f}x at b = {b}" for b, v in by_batch.items()
        )
    return text


def speedup_headline(provider: str, block: dict) -> str:
    return (
        f"{LABELS[provider]} is {block['geomean_speedup']:.2f}x faster than torch.topk "
        f"(geomean over {block['cells']} cells; {block['min_speedup']:.2f}x to "
        f"{block['max_speedup']:.2f}x)"
    )


SUMMARY_SETS = (
    "decode-grid", "graph", "mtp", "prefill", "real", "adversarial", "tail", "tail-graph",
    "ragged", "ragged-graph", "half", "half-graph",
)  # fmt: skip


def where(set_name: str, timing: str) -> str:
    """A set and timing as a headline's prefix."""
    if set_name == "decode-grid" and timing == "eager":
        return "decode grid, eager"
    if set_name == "graph" and timing == "graph":
        return "decode grid, CUDA-graph replay"
    return f"{set_name}, {timing}"


def summary(records) -> dict:
    """The numbers the issues quote.

    Kept from earlier results: ``decode_grid_eager`` / ``decode_grid_graph`` (GVR's speedup
    over torch.topk on the decode grid), ``b1_n262144_max_us``, ``host_us_per_call``. Added:
    ``by_set[set][timing]`` with ``<provider>_vs_torch`` speedup blocks for every timed
    provider and ``gvr_vs_gvr2`` / ``gvr-raw_vs_gvr2`` ratio blocks (GVR time / gvr_2 time:
    geomean, cells where GVR is faster, best and worst ratio and their cells, and per-batch
    geomeans on the decode grid), and ``headlines``, those numbers as sentences.
    """
    recs = [_as_dict(r) for r in records]
    out: dict = {}
    for timing in ("eager", "graph"):
        sp = [
            r["speedup_vs_torch"]
            for r in recs
            if r["set"] in GRID_SETS
            and r["provider"] == "gvr"
            and r["timing"] == timing
            and r.get("speedup_vs_torch")
        ]
        if sp:
            out[f"decode_grid_{timing}"] = _speedups(sp)
    b1 = [
        r["median_us"]
        for r in recs
        if r["set"] == "decode-grid"
        and r["provider"] == "gvr"
        and r["rows"] == 1
        and r["n"] == 262144
        and r.get("median_us")
    ]
    if b1:
        out["b1_n262144_max_us"] = max(b1)
    host = {f"{r['provider']}_k{r['k']}": r["median_us"] for r in recs if r["timing"] == "host"}
    if host:
        out["host_us_per_call"] = host
    by_set: dict = {}
    headlines: list[str] = []
    for set_name in SUMMARY_SETS:
        for timing in ("eager", "graph"):
            sel = [r for r in recs if r["set"] == set_name and r["timing"] == timing]
            block: dict = {}
            for prov in PROVIDERS:
                if prov in ("torch", "amax"):
                    continue
                sp = [
                    r["speedup_vs_torch"]
                    for r in sel
                    if r["provider"] == prov and r.get("speedup_vs_torch")
                ]
                if sp:
                    block[f"{prov}_vs_torch"] = _speedups(sp)
                    text = speedup_headline(prov, block[f"{prov}_vs_torch"])
                    headlines.append(f"{where(set_name, timing)}: {text}")
            for prov in GVR_PROVIDERS:
                pr = [r for r in sel if r["provider"] == prov and r.get("ratio_vs_gvr2")]
                if not pr:
                    continue
                rb = ratio_block(pr)
                if set_name in GRID_SETS:
                    rb["by_batch"] = {
                        str(b): ratio_block([r for r in pr if r["rows"] == b], cells=False)
                        for b in sorted({r["rows"] for r in pr})
                    }
                block[f"{prov}_vs_gvr2"] = rb
                headlines.append(f"{where(set_name, timing)}: {ratio_headline(prov, rb)}")
            if block:
                by_set.setdefault(set_name, {})[timing] = block
    tail = tail_vs_gaussian(recs)
    for timing, block in tail.items():
        out.setdefault("tail_vs_gaussian", {})[timing] = block
        headlines.append(
            f"tail, {timing}: the tie-heavy families take at most {block['worst_ratio']:.2f}x"
            f" GVR's gaussian time of the same shape ({block['worst_cell']}; geomean"
            f" {block['geomean_ratio']:.2f}x over {block['cells']} cells), and are at least"
            f" {block['min_vs_torch']:.2f}x faster than torch.topk"
        )
    half = half_vs_fp32(recs)
    for timing, block in half.items():
        out.setdefault("half_vs_fp32", {})[timing] = block
        big = block.get("b512_n262144")
        if big:
            headlines.append(
                f"half, {timing}: at b=512, n=262144 GVR on bf16 takes "
                + ", ".join(f"{c['us']:.1f} us ({c['ratio']:.2f}x its fp32 time)" for c in big)
                + f" for K = {', '.join(str(c['k']) for c in big)}; bf16 geomean"
                f" {block['geomean_ratio']:.2f}x of fp32 over {block['cells']} cells"
            )
    bw = bandwidth_cells(recs)
    for timing, block in bw.items():
        out.setdefault("bandwidth", {})[timing] = block
        big = block["b512_n262144"]
        if big:
            headlines.append(
                f"bandwidth, {timing}: at b=512, n=262144 GVR takes "
                + ", ".join(f"{c['gvr_us']:.1f} us ({c['gvr_gbps']:.0f} GB/s)" for c in big)
                + f" for K = {', '.join(str(c['k']) for c in big)}; one read pass (torch.amax)"
                f" {min(c['amax_us'] for c in big):.1f} us; every cell with b >= 128 at most"
                f" {block['worst_vs_gvr2_b128']:.2f}x gvr_2's time"
            )
    grouped = ragged_vs_grouped(recs)
    for timing, block in grouped.items():
        out.setdefault("ragged_vs_grouped", {})[timing] = block
        headlines.append(
            f"ragged, {timing}: GVR takes {block['geomean_ratio']:.2f}x the time of the same rows"
            f" run as uniform batches grouped by length (geomean over {block['cells']} cells;"
            f" worst {block['worst_ratio']:.2f}x)"
        )
    if by_set:
        out["by_set"] = by_set
    if headlines:
        out["headlines"] = headlines
    return out


def bandwidth_cells(recs) -> dict:
    """Per timing, the decode-grid cells with b >= 128 (the bandwidth-bound shapes): GVR's
    worst time over gvr_2's there, and for b = 512, n = 262,144 GVR's time and effective
    bandwidth (bytes of scores read / time) beside the read floor (``amax``) of the same
    tensor in the same run."""
    out = {}
    for timing in ("eager", "graph"):
        by_cell: dict = {}
        for r in recs:
            if r["set"] in GRID_SETS and r["timing"] == timing and r.get("median_us"):
                key = (r["k"], r["rows"], r["n"])
                by_cell.setdefault(key, {})[r["provider"]] = r
        ratios = {
            key: c["gvr"]["median_us"] / c["gvr2"]["median_us"]
            for key, c in by_cell.items()
            if key[1] >= 128 and {"gvr", "gvr2"} <= set(c)
        }
        if not ratios:
            continue
        big = [
            {"k": key[0], "gvr_us": c["gvr"]["median_us"], "gvr_gbps": c["gvr"]["gbps"],
             "gvr2_us": c.get("gvr2", {}).get("median_us"),
             "amax_us": c.get("amax", {}).get("median_us", float("nan"))}
            for key, c in sorted(by_cell.items())
            if key[1] == 512 and key[2] == 262144 and "gvr" in c
        ]  # fmt: skip
        worst = max(ratios, key=ratios.get)
        out[timing] = {
            "cells_b128": len(ratios),
            "worst_vs_gvr2_b128": ratios[worst],
            "worst_cell_b128": "k={} b={} n={}".format(*worst),
            "geomean_vs_gvr2_b128": geomean(list(ratios.values())),
            "b512_n262144": big,
        }
    return out


def tail_vs_gaussian(recs) -> dict:
    """Per timing: GVR's time on each tail-set family cell over its time on the gaussian rows
    of the same ``(k, rows, n)`` in the same run: cells, geomean, worst (and its cell), per
    family worst, and the smallest speedup over torch.topk."""
    out = {}
    for timing in ("eager", "graph"):
        sel = [
            r for r in recs
            if r["set"] in ("tail", "tail-graph") and r["timing"] == timing
            and r["provider"] == "gvr"
            and r.get("median_us")
        ]  # fmt: skip
        gauss = {
            (r["k"], r["rows"], r["n"]): r["median_us"] for r in sel if r["family"] == "gaussian"
        }
        cells = [
            (r["median_us"] / gauss[(r["k"], r["rows"], r["n"])], r)
            for r in sel
            if r["family"] != "gaussian" and (r["k"], r["rows"], r["n"]) in gauss
        ]
        if not cells:
            continue
        worst, wr = max(cells, key=lambda c: c[0])
        fams: dict = {}
        for ratio, r in cells:
            fams[r["family"]] = max(fams.get(r["family"], 0.0), ratio)
        vs_torch = [r["speedup_vs_torch"] for _, r in cells if r.get("speedup_vs_torch")]
        out[timing] = {
            "cells": len(cells),
            "geomean_ratio": geomean([c[0] for c in cells]),
            "worst_ratio": worst,
            "worst_cell": f"{wr['family']} k={wr['k']} b={wr['rows']} n={wr['n']}",
            "worst_by_family": fams,
            "min_vs_torch": min(vs_torch) if vs_torch else float("nan"),
        }
    return out


def half_vs_fp32(recs) -> dict:
    """Per timing: GVR's time on 16-bit rows over its time on a float32 copy of them
    (``gvr-fp32``) in the same run: cells, geomean, worst, and the b = 512, n = 262,144 cells
    (the bandwidth-bound shape) of bfloat16."""
    out = {}
    for timing in ("eager", "graph"):
        by_cell: dict = {}
        for r in recs:
            if r["set"] in ("half", "half-graph") and r["timing"] == timing and r.get("median_us"):
                key = (r["k"], r["rows"], r["n"], r.get("dtype"))
                by_cell.setdefault(key, {})[r["provider"]] = r["median_us"]
        cells = {
            key: c["gvr"] / c["gvr-fp32"]
            for key, c in by_cell.items()
            if {"gvr", "gvr-fp32"} <= set(c)
        }
        if not cells:
            continue
        big = [
            {"k": key[0], "us": by_cell[key]["gvr"], "fp32_us": by_cell[key]["gvr-fp32"],
             "ratio": ratio}
            for key, ratio in sorted(cells.items())
            if key[1] == 512 and key[2] == 262144 and key[3] == "bfloat16"
        ]  # fmt: skip
        worst_key = max(cells, key=cells.get)
        out[timing] = {
            "cells": len(cells),
            "geomean_ratio": geomean(list(cells.values())),
            "worst_ratio": cells[worst_key],
            "worst_cell": "k={} b={} n={} {}".format(*worst_key),
            "b512_n262144": big,
        }
    return out


def ragged_vs_grouped(recs) -> dict:
    """Per timing: GVR's time on each ragged batch over the summed time of its rows run as
    uniform batches grouped by length (``gvr-grouped``): cells, geomean, worst."""
    out = {}
    for timing in ("eager", "graph"):
        by_cell: dict = {}
        for r in recs:
            if r["set"] in RAGGED_SETS and r["timing"] == timing and r.get("median_us"):
                key = (r["k"], r["rows"], r["n"])
                by_cell.setdefault(key, {})[r["provider"]] = r["median_us"]
        ratios = [
            c["gvr"] / c["gvr-grouped"]
            for c in by_cell.values()
            if {"gvr", "gvr-grouped"} <= set(c)
        ]
        if ratios:
            out[timing] = {
                "cells": len(ratios),
                "geomean_ratio": geomean(ratios),
                "worst_ratio": max(ratios),
                "best_ratio": min(ratios),
            }
    return out


def claimed_failures(records) -> list[str]:
    """The inexact cells of providers that claim exactness: any of them fails the run."""
    return [
        f"{r['provider']} {r['set']} {r['timing']} k={r['k']} rows={r['rows']} n={r['n']} "
        f"family={r['family']}: {r['note']}"
        for r in map(_as_dict, records)
        if r["exact"] is False and r["provider"] in CLAIMS_EXACT
    ]


def inexact_by_family(records) -> dict:
    """``{provider: {family: inexact cells}}`` for the providers that do not claim exactness;
    these are reported, and do not change the exit status."""
    counts: dict = defaultdict(Counter)
    for r in map(_as_dict, records):
        if r["exact"] is False and r["provider"] not in CLAIMS_EXACT:
            counts[r["provider"]][r["family"]] += 1
    return {prov: dict(c) for prov, c in counts.items()}


def exit_status(records) -> int:
    return 1 if claimed_failures(records) else 0


def _status(r: dict | None) -> str:
    """A record as one short table cell: its median time, or why it has none."""
    if r is None:
        return "-"
    if r.get("median_us"):
        return f"{r['median_us']:.1f}"
    if r.get("exact") is False:
        return "inexact"
    note = r.get("note") or ""
    for prefix, short in (
        ("not applicable", "n/a"),
        ("not importable", "absent"),
        ("not timed", "untimed"),
        ("failed", "failed"),
    ):
        if note.startswith(prefix):
            return short
    return "-"


COMPARISON_COLUMNS = (
    "set",
    "k",
    "rows",
    "n",
    "family",
    "timing",
    "gvr us",
    "gvr2 us",
    "torch us",
    "gvr/gvr2",
    "gvr x torch",
)


def comparison_rows(records) -> list[tuple[str, ...]]:
    """One row per cell (host-time cells left out): GVR, gvr_2 and torch.topk times, GVR's
    time over gvr_2's and GVR's speedup over torch.topk. The GVR column is the public API,
    or the raw kernel where only that was run."""
    recs = [_as_dict(r) for r in records]
    gvr_name = "gvr" if any(r["provider"] == "gvr" for r in recs) else "gvr-raw"
    rows = []
    for key, by in group_cells(recs).items():
        set_name, timing, k, b, n, nn, cr, family, dtype = key
        if timing == "host":
            continue
        g = by.get(gvr_name)
        fam = family if nn == 1 and cr == 1 else f"{family} nn{nn} cr{cr}"
        if dtype != "float32":
            fam = f"{fam} {dtype}"
        ratio = g.get("ratio_vs_gvr2") if g else None
        sp = g.get("speedup_vs_torch") if g else None
        rows.append(
            (
                set_name,
                str(k),
                str(b),
                str(n),
                fam,
                timing,
                _status(g),
                _status(by.get("gvr2")),
                _status(by.get("torch")),
                "-" if ratio is None else f"{ratio:.2f}",
                "-" if sp is None else f"{sp:.2f}",
            )
        )
    return rows


COMPARISON_LEGEND = (
    "gvr/gvr2: GVR time / gvr_2 time (< 1: GVR faster); gvr x torch: torch.topk time / GVR "
    "time. n/a: outside the provider's contract; absent: not importable; inexact: not exact "
    "on this input, not timed; untimed: could not be captured in a CUDA graph."
)


def print_comparison(records) -> None:
    rows = comparison_rows(records)
    if not rows:
        return
    try:
        from rich import box
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(COMPARISON_COLUMNS)]
        for r in (COMPARISON_COLUMNS, *rows):
            print("  ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)))
        print(COMPARISON_LEGEND)
        return
    t = Table(
        title="GVR, gvr_2 and torch.topk per cell (us, cold L2)",
        caption=COMPARISON_LEGEND,
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    for col in COMPARISON_COLUMNS:
        if col == "family":
            t.add_column(col, max_width=16, overflow="fold")
        else:
            t.add_column(col, justify="left" if col in ("set", "timing") else "right")
    for r in rows:
        t.add_row(*r)
    Console(width=100).print(t)


def print_table(records):
    """Every record, one line each (``--full-table``)."""
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        for r in records:
            print(r)
        return
    t = Table(title="top-K benchmark, every provider (us, cold L2)")
    for col in (
        "set",
        "provider",
        "timing",
        "k",
        "rows",
        "n",
        "nn",
        "cr",
        "family",
        "median",
        "GB/s",
        "x torch",
        "/ gvr2",
        "exact",
    ):
        t.add_column(col)
    for r in map(_as_dict, records):
        t.add_row(
            r["set"],
            r["provider"],
            r["timing"],
            str(r["k"]),
            str(r["rows"]),
            str(r["n"]),
            str(r["next_n"]),
            str(r["compress_ratio"]),
            r["family"],
            "-" if r["median_us"] is None else f"{r['median_us']:.1f}",
            "-" if r["gbps"] is None else f"{r['gbps']:.0f}",
            "-" if r["speedup_vs_torch"] is None else f"{r['speedup_vs_torch']:.2f}",
            "-" if r.get("ratio_vs_gvr2") is None else f"{r['ratio_vs_gvr2']:.2f}",
            str(r["exact"]) + (f" {r['note']}" if r["note"] else ""),
        )
    Console(width=200).print(t)


# ----------------------------------------------------------------------------- main
def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--sets", default="decode-grid,graph,host", help=f"comma-separated, from {','.join(SETS)}"
    )
    ap.add_argument(
        "--providers",
        default=DEFAULT_PROVIDERS,
        help=f"comma-separated, from {','.join(PROVIDERS)} (default {DEFAULT_PROVIDERS})",
    )
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--real-rows", default=None, help="folder of real score-row safetensors")
    ap.add_argument("--out", default=None, help="folder for the JSON and plots")
    ap.add_argument("--tag", default="bench", help="file name stem")
    ap.add_argument("--quick", action="store_true", help="a few cells per set")
    ap.add_argument(
        "--grid-n",
        default=None,
        help="comma-separated row lengths of the decode-grid, graph and half sets "
        f"(default {','.join(map(str, GRID_N))})",
    )
    ap.add_argument(
        "--grid-b",
        default=None,
        help=f"comma-separated batches of those sets (default {','.join(map(str, GRID_B))})",
    )
    ap.add_argument(
        "--ragged-widths",
        default=None,
        help="comma-separated arena widths of the ragged sets "
        f"(default {','.join(map(str, RAGGED_WIDTHS))})",
    )
    ap.add_argument(
        "--ragged-b",
        default=None,
        help=f"comma-separated batches of the ragged sets (default {','.join(map(str, RAGGED_B))})",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--warmup-s",
        type=float,
        default=1.5,
        help="seconds of bf16 matmuls that raise the GPU clocks before each set's first cell "
        "(0: none)",
    )
    ap.add_argument(
        "--full-table", action="store_true", help="also print every record, one line each"
    )
    args = ap.parse_args(argv)
    args.sets = [s for s in args.sets.split(",") if s]
    bad = [s for s in args.sets if s not in SETS]
    if bad:
        ap.error(f"unknown sets {bad}; known: {SETS}")
    args.providers = [p for p in args.providers.split(",") if p]
    bad = [p for p in args.providers if p not in PROVIDERS]
    if bad:
        ap.error(f"unknown providers {bad}; known: {PROVIDERS}")
    for name, default in (
        ("grid_n", GRID_N), ("grid_b", GRID_B), ("ragged_widths", None), ("ragged_b", None)
    ):  # fmt: skip
        text = getattr(args, name)
        if text is None:
            setattr(args, name, None if args.quick else default)
            continue
        try:
            values = tuple(int(x) for x in text.split(",") if x)
        except ValueError:
            values = ()
        if not values or min(values) < 1:
            flag = "--" + name.replace("_", "-")
            ap.error(f"{flag} must be comma-separated positive integers, got {text!r}")
        setattr(args, name, values)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_topk needs a CUDA device", file=sys.stderr)
        return 2
    sets, providers = args.sets, args.providers
    timer = Timer(args.reps)
    g = torch.Generator(device="cuda").manual_seed(args.seed)
    records: list[Record] = []
    clocks = [read_clocks("start")]
    warmups = []
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover

        def tqdm(x, **_):
            return x

    for set_name in sets:
        cases = list(build_cases(set_name, g, args))
        if args.warmup_s > 0:
            warmups.append({"set": set_name, **warm_up(args.warmup_s)})
            clocks.append(read_clocks(f"after warm-up, before {set_name}"))
        for case in tqdm(cases, desc=set_name, file=sys.stderr):
            run_case(case, timer, providers, records)
        del cases
    clocks.append(read_clocks("end"))
    if args.full_table:
        print_table(records)
    print_comparison(records)
    result = {
        "metadata": metadata(providers, clocks, warmups),
        "summary": summary(records),
        "inexact_by_family": inexact_by_family(records),
        "records": [asdict(r) for r in records],
        "failures": claimed_failures(records),
    }
    print(json.dumps(result["summary"], indent=1))
    for line in result["summary"].get("headlines", []):
        print(line)
    if result["inexact_by_family"]:
        print("inexact (not claimed exact):", json.dumps(result["inexact_by_family"]))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{args.tag}.json").write_text(json.dumps(result, indent=1))
        try:
            from plots import make_plots

            make_plots(result, out, args.tag)
        except Exception as exc:  # plots are a convenience; the JSON is the record
            print(f"plots skipped: {exc}", file=sys.stderr)
    if result["failures"]:
        print("INEXACT:", *result["failures"], sep="\n  ", file=sys.stderr)
    return exit_status(records)


if __name__ == "__main__":
    sys.exit(main())
