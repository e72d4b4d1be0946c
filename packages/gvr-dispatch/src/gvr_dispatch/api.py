"""The public top-K API (module-level functions over one default :class:`Dispatcher`).

Shapes, units and conventions shared by the three entry points:

- ``logits``: float32, bfloat16 or float16 ``[rows, width]`` with any row stride (on CUDA
  16-bit rows are read in place by 16-bit kernels; on the CPU they run through an exact
  float32 widening; see ``docs/api.md``). CUDA tensors run the GVR kernels (sm_90 / sm_10x),
  CPU tensors the CPU path (the numba CPU engine, see ``gvr_dispatch.cpu``); every tensor
  argument lives on the logits device. The kernels read in place a unit inner stride, a row
  stride that is a multiple of 4 elements (8 for 16-bit logits) and a 16-byte-aligned base;
  other layouts are copied first (a warning is logged once; refused under CUDA-graph
  capture). A single row's stride does not matter.
- Output ``out``: int32 ``[rows, k]``, window-local indices in unspecified order (see
  ``sorted``); a row with ``n <= k`` valid scores holds ``0 .. n-1`` then ``-1``; an empty row
  all ``-1``. ``values``: float32 ``[rows, k]``, the selected logits bit for bit, ``-FLT_MAX``
  beside ``-1``; for 16-bit logits the logits dtype (its most negative finite value beside
  ``-1``), or a float32 buffer the caller passes.
- ``k``: ``1 <= k <= 2048`` on CUDA, ``1 <= k <= 2**31 - 1`` on the CPU; may be left out when
  ``out`` (or ``values``) is given, and must agree with it otherwise.
- Exactness: the selected value multiset equals the exact top-K of every row (ties, +-inf,
  denormals, -0.0; NaN ranks above +inf). ``deterministic=True``: the K-th value's tie class
  yields its smallest indices (so does the CPU path, always). ``sorted=True``: descending value,
  ties by ascending index, ``-1`` last.
- Returns ``out``, or ``(out, values)`` when ``values`` is given or ``return_values=True``.
  Buffers passed in are filled in place and returned; missing ones are allocated (under
  CUDA-graph capture, from the graph's memory pool).
- Errors: ``TypeError`` / ``ValueError`` naming the argument, raised before anything is
  written; ``RuntimeError`` for what capture forbids (a launch key that was not warmed, a host
  read, a copy). Lengths and windows are not read on the host: negative lengths are empty
  rows and windows are clamped to ``[0, width]``.
"""

from __future__ import annotations

import threading

import torch

from . import cpu
from .cache import FROM_ENV
from .cpu import WINDOW_FULL, WINDOW_LENGTHS, WINDOW_PREFILL
from .dispatcher import Dispatcher
from .warmup import WarmupReport
from .workspace import Workspace

__all__ = [
    "topk_decode",
    "topk_prefill",
    "topk",
    "warmup",
    "workspace_for",
    "workspace_bytes",
    "set_cache_dir",
    "get_dispatcher",
    "device_spec",
]

_default: Dispatcher | None = None
_default_lock = threading.Lock()


def get_dispatcher() -> Dispatcher:
    """The default dispatcher the module-level functions use (created on first use)."""
    global _default
    d = _default
    if d is None:
        with _default_lock:
            if _default is None:
                _default = Dispatcher()
            d = _default
    return d


def topk_decode(
    logits,
    kv_lens,
    k=None,
    *,
    next_n=1,
    compress_ratio=1,
    out=None,
    values=None,
    return_values=False,
    max_seq_len=None,
    workspace=None,
    deterministic=False,
    sorted=False,
    block_max=None,
):
    """Top-K of every decode row of the indexer scores.

    Row ``r`` belongs to request ``r // next_n`` and selects from its first
    ``n_r = max(0, (kv_lens[r // next_n] - next_n + r % next_n + 1) // compress_ratio)``
    scores, clamped to ``width``.

    Args:
        logits: float32, bfloat16 or float16 ``[batch * next_n, width]`` (compressed KV
            positions).
        kv_lens: int32 ``[batch]``, contiguous: each request's total KV length in
            *uncompressed* tokens (the step's new tokens included).
        k: top-K size (see the module docstring).
        next_n: rows per request (MTP draft tokens + 1), ``>= 1``.
        compress_ratio: KV compression ratio, a power of two in ``[1, 2**30]``.
        out: optional int32 ``[rows, k]`` contiguous buffer for the indices.
        values: optional ``[rows, k]`` contiguous buffer for the values, in the logits dtype
            or float32; it must not require grad while grad mode is on.
        return_values: also return values without a ``values`` buffer.
        max_seq_len: optional upper bound on ``kv_lens`` in uncompressed tokens (e.g. the
            engine's maximum sequence length), to tighten the launch envelope below the
            logits width. Without it the envelope is ``width``. Either way the launch depends
            only on capture-stable quantities and nothing is read from the device. Rows
            longer than the envelope stay exact (the envelope only picks the configuration;
            rows clamp to ``width``).
        workspace: optional split-row workspace (:class:`Workspace`, or a zeroed uint8 / int32
            / uint32 CUDA tensor, 16-byte aligned, at least :func:`workspace_bytes`); default:
            the dispatcher's one for the current stream (one per device under capture).
            Ignored for CPU tensors.
        deterministic: the K-th value's tie class yields its smallest indices.
        sorted: descending value, ties by ascending index, ``-1`` last.
        block_max: optional float32 ``[rows, ceil(width / 32)]`` tensor (unit inner stride)
            of block bounds from the scores' producer: entry ``[r, j]`` at least every score
            of columns ``[32 j, 32 j + 32)`` of row ``r`` inside the row's window (an upper
            bound; ``gvr_integration.indexer.block_maxima`` writes exact maxima). Float32
            launches of at least 128 MiB of logits, or 32 MiB with rows of 131,072 and more
            (``gvr_kernels.routing.BLOCK_SKIP_*``), then read only the blocks whose bound
            reaches the row's threshold (block-skip, after TensorRT-LLM's draft PR #18122);
            other launches ignore it. Exact whenever the contract holds; with
            ``GVR_CHECK_BLOCK_MAX=1`` every call checks it first (``gvr_dispatch.blockmax``).

    Returns:
        ``out`` (int32 ``[rows, k]``), or ``(out, values)``.

    Raises:
        TypeError, ValueError: a bad argument, named in the message (``block_max`` of the
            wrong dtype, shape, device or inner stride; in debug mode, a bound below a score
            of its block); nothing is written.
        RuntimeError: under CUDA-graph capture: a launch key that was not warmed, or a
            logits layout that needs a copy, or the debug check.
    """
    # Positional calls into the dispatcher: this is the per-step hot path.
    d = _default or get_dispatcher()
    res = d._decode_fast(
        logits, kv_lens, k, next_n, compress_ratio, out, values, return_values, max_seq_len,
        workspace, deterministic, sorted, block_max,
    )  # fmt: skip
    if res is not None:
        return res
    return d._decode(
        logits, kv_lens, k, next_n, compress_ratio, out, values, return_values, max_seq_len,
        workspace, deterministic, sorted, block_max,
    )  # fmt: skip


def topk_prefill(
    logits,
    row_starts,
    row_ends,
    k=None,
    *,
    out=None,
    values=None,
    return_values=False,
    workspace=None,
    deterministic=False,
    sorted=False,
    block_max=None,
):
    """Top-K of every prefill row over its window ``[row_starts[r], row_ends[r])``.

    Args:
        logits: float32, bfloat16 or float16 ``[rows, width]``.
        row_starts, row_ends: int32 ``[rows]``, contiguous, in logits columns; a window is
            clamped to ``s = clamp(row_starts, 0, width)``, ``e = clamp(row_ends, s, width)``
            on either device (on CUDA not checked on the host: that would read device
            memory).
        k, out, values, return_values, workspace, deterministic, sorted, block_max: as in
            :func:`topk_decode` (``block_max`` blocks are of the physical row's columns, so a
            window meets partial blocks at its ends).

    Returns:
        ``out`` (int32 ``[rows, k]``, window-local: column ``- s``, the clamped start), or
        ``(out, values)``.

    Raises:
        TypeError, ValueError: a bad argument, named in the message; nothing is written.
        RuntimeError: under CUDA-graph capture: a launch key that was not warmed, or a logits
            layout that needs a copy.
    """
    d = _default or get_dispatcher()
    if d._cpu_direct_ok and workspace is None and block_max is None:
        res = cpu.direct(
            WINDOW_PREFILL, logits, row_starts, row_ends, k, 1, 1, out, values, return_values,
            deterministic, sorted,
        )  # fmt: skip
        if res is not None:
            return res
    return d._prefill(
        logits, row_starts, row_ends, k, out, values, return_values, workspace, deterministic,
        sorted, block_max,
    )  # fmt: skip


def topk(
    logits,
    k=None,
    lengths=None,
    *,
    out=None,
    values=None,
    return_values=False,
    workspace=None,
    deterministic=False,
    sorted=False,
    block_max=None,
):
    """Top-K of dense rows: row ``r`` selects from its first ``lengths[r]`` scores (clamped to
    ``[0, width]``), or from the whole row when ``lengths`` is None.

    Args:
        logits: float32, bfloat16 or float16 ``[rows, width]``.
        k: top-K size; may be None when ``out`` or ``values`` gives it.
        lengths: optional int32 ``[rows]``, contiguous.
        out, values, return_values, workspace, deterministic, sorted, block_max: as in
            :func:`topk_decode`.

    Returns:
        ``out`` (int32 ``[rows, k]``), or ``(out, values)``.

    Raises:
        TypeError, ValueError: a bad argument, named in the message; nothing is written.
        RuntimeError: under CUDA-graph capture: a launch key that was not warmed, or a logits
            layout that needs a copy.
    """
    d = _default or get_dispatcher()
    if d._cpu_direct_ok and workspace is None and block_max is None:  # CPU: the direct path
        res = cpu.direct(
            WINDOW_FULL if lengths is None else WINDOW_LENGTHS, logits, lengths, None, k, 1, 1,
            out, values, return_values, deterministic, sorted,
        )  # fmt: skip
        if res is not None:
            return res
    return d._topk(
        logits, k, lengths, out, values, return_values, workspace, deterministic, sorted,
        block_max,
    )  # fmt: skip


def warmup(
    *,
    k,
    max_seq_len=None,
    rows=(1,),
    next_n=1,
    compress_ratio=1,
    row_stride=None,
    width=None,
    modes=("decode",),
    with_values=False,
    deterministic=False,
    device=None,
    progress=True,
    spec=None,
    cache_dir=FROM_ENV,
    dtype=torch.float32,
    block_max=False,
) -> WarmupReport:
    """Compile (or load from the persistent cache) every kernel that calls inside an envelope
    can route to, resolve their launches, allocate workspaces and dummy tensors, and run each
    kernel once, so that those calls neither compile nor allocate afterwards (CUDA-graph
    capture needs that). Idempotent: a second call compiles nothing.

    Args:
        k: one K or a tuple of them.
        max_seq_len: the decode envelope in uncompressed tokens (what the calls will pass);
            ``None`` warms the calls without it (their envelope is ``width``).
        rows: logits row counts the calls will use (decode: ``batch * next_n``).
        next_n, compress_ratio: as the decode calls will pass them.
        row_stride: the logits row stride the calls will use; a stride that is not a multiple
            of 4 (8 for 16-bit logits) is reported in ``notes`` (those calls copy and cannot
            be captured).
        width: ``logits.shape[1]`` of the calls; required for ``"prefill"``, ``"dense"`` and
            decode without ``max_seq_len``; decode with ``max_seq_len`` assumes
            ``width >= max_seq_len // compress_ratio``.
        modes: any of ``"decode"`` (:func:`topk_decode`), ``"prefill"`` (:func:`topk_prefill`),
            ``"dense"`` (:func:`topk`, with and without ``lengths``).
        with_values: the values flag of the calls (``sorted=True`` calls use values kernels);
            ``(False, True)`` warms both.
        deterministic: likewise for the tie mode.
        device: the CUDA device (default: the current one); ``"cpu"`` warms the CPU engine.
        progress: show a progress bar.
        spec: a :class:`gvr_kernels.spec.DeviceSpec` to compile for without a GPU (fills
            the memory and disk caches only; no launches are resolved).
        cache_dir: set the persistent cache folder first (``None``: no disk cache); see
            :func:`set_cache_dir`.
        dtype: the logits dtype of the calls: ``torch.float32`` (default), ``torch.bfloat16``
            or ``torch.float16``, or a tuple of them (16-bit logits have their own kernels).
        block_max: whether the calls pass ``block_max`` (their launches may take block-skip
            kernels); ``(False, True)`` warms both.

    Returns:
        A :class:`WarmupReport` (which kernels were compiled, loaded from disk or already in
        memory, and how long each took).

    Raises:
        TypeError, ValueError: a bad argument, named in the message.
        RuntimeError: called during CUDA-graph capture.
    """
    return get_dispatcher().warmup(
        k=k,
        max_seq_len=max_seq_len,
        rows=rows,
        next_n=next_n,
        compress_ratio=compress_ratio,
        row_stride=row_stride,
        width=width,
        modes=modes,
        with_values=with_values,
        deterministic=deterministic,
        device=device,
        progress=progress,
        spec=spec,
        cache_dir=cache_dir,
        dtype=dtype,
        block_max=block_max,
    )


def workspace_for(device=None, stream=None) -> Workspace:
    """The default split-row workspace of ``(device, stream)`` (current device and stream when
    omitted), owned by the dispatcher and allocated on first request (zeroed, sized for the
    largest split launch of the device).

    Args:
        device: as in :func:`device_spec` (a CUDA device).
        stream: a ``torch.cuda.Stream`` of that device, or ``None`` (its current stream).

    Raises:
        TypeError, ValueError: ``device`` is not a CUDA device (as in :func:`device_spec`).
        RuntimeError: no CUDA device is available, or the workspace does not exist yet and
            the current stream is capturing.
    """
    _check_cuda_device(device, "workspace_for")
    return get_dispatcher().workspace_for(device, stream)


def workspace_bytes(device=None) -> int:
    """Bytes a caller-provided ``workspace=`` needs to serve every call on ``device`` (as in
    :func:`device_spec`: a CUDA device; CPU calls take no workspace).

    Raises:
        TypeError, ValueError: ``device`` is not a CUDA device (as in :func:`device_spec`).
        RuntimeError: no CUDA device is available.
    """
    _check_cuda_device(device, "workspace_bytes")
    return get_dispatcher().workspace_bytes(device)


def set_cache_dir(cache_dir) -> None:
    """Put the persistent compile cache in ``cache_dir`` (``None`` turns it off). Default:
    ``$GVR_CACHE_DIR``, else ``~/.cache/gvr``; ``GVR_CACHE_DISABLE=1`` turns it off."""
    get_dispatcher().set_cache_dir(cache_dir)


def device_spec(device=None):
    """The :class:`gvr_kernels.spec.DeviceSpec` the dispatcher routes with on a CUDA
    device (read once from the driver).

    Args:
        device: ``None`` (the current CUDA device), a device index, ``"cuda"``, ``"cuda:i"`` or
            a ``torch.device`` of type cuda.

    Raises:
        TypeError: ``device`` is not None, an int, a str or a ``torch.device``.
        ValueError: ``device`` is not a CUDA device (the CPU has no ``DeviceSpec``: CPU
            tensors run the CPU engine, which has no launch configurations), or not a valid
            device string.
        RuntimeError: no CUDA device is available.
    """
    _check_cuda_device(device, "device_spec")
    return get_dispatcher().spec(device)


def _check_cuda_device(device, caller: str) -> None:
    """``device`` names a CUDA device (``None``, an index, ``"cuda"``, ``"cuda:i"`` or a
    ``torch.device`` of type cuda) and one is available; ``caller`` names the function in
    the messages.

    Raises:
        TypeError, ValueError, RuntimeError: as :func:`device_spec` documents.
    """
    kernel_type = get_dispatcher().runtime.kernel_device_type
    if device is not None:
        if isinstance(device, bool) or not isinstance(device, (int, str, torch.device)):
            raise TypeError(
                f"device must be None, an int, a str or a torch.device, got "
                f"{type(device).__name__} {device!r}"
            )
        if isinstance(device, int):
            if device < 0:
                raise ValueError(f"device must be a CUDA device index >= 0, got {device}")
        else:
            try:
                dev = torch.device(device)
            except RuntimeError as e:
                raise ValueError(f"device must name a CUDA device, got {device!r}") from e
            if dev.type != kernel_type:
                raise ValueError(
                    f"device must be a CUDA device, got {device!r}: {caller} is for the "
                    f"kernels' GPUs; CPU tensors run the CPU engine, which needs none"
                )
    if kernel_type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            f"{caller} needs a CUDA device and none is available (torch.cuda.is_available() "
            "is False); pass a DeviceSpec to warmup(spec=...) to compile without a GPU"
        )
