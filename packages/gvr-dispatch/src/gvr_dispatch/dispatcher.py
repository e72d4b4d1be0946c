"""The dispatcher: the one owner of kernels, launches, workspaces and device specs.

A :class:`Dispatcher` holds

- the compile cache (:class:`~gvr_dispatch.cache.KernelCache`, memory + disk),
- the launch table: launch key -> :class:`~gvr_dispatch.launch.Launch`,
- device specs (read once per device), dummy tensors per device,
- split workspaces: one per (device, stream) for eager calls, one per device for launches
  captured into CUDA graphs,
- the log-once bookkeeping.

The module-level API (:mod:`gvr_dispatch.api`) forwards to one default instance; create another
for isolation (tests, several cache folders).

Under CUDA-graph capture a call compiles nothing, allocates nothing except the output tensors
it returns when ``out``/``values`` are not given (and the temporaries of ``sorted=True``), both
from the graph's private memory pool, reads no device data and never synchronises; a launch key
that was not warmed raises ``RuntimeError`` naming the key.
"""

from __future__ import annotations

import logging
import operator
import threading
import time

import torch
from gvr_reference import cpu_engine

from . import cpu
from .blockmax import BLOCK, DEBUG_ENV, check_block_max, debug_enabled, raise_on_violations
from .cache import FROM_ENV, KernelCache
from .device import CudaRuntime, max_workspace_words
from .launch import VEC, Dummies, Launch, kernel_view, padded_copy, prime
from .routing import LaunchKey, decode_envelope, describe_key, route
from .sorting import sort_rows_
from .validation import (
    CPU_MAX_K,
    HALF_DTYPES,
    KERNEL_MAX_K,
    KERNEL_MAX_WIDTH,
    MAX_SEQ_LEN_MAX,
    check_compress_ratio,
    check_cpu_k,
    check_disjoint,
    check_flag,
    check_index_tensor,
    check_kernel_k,
    check_kernel_width,
    check_logits,
    check_max_seq_len,
    check_next_n,
    check_output,
    half_values_message,
    resolve_k,
)
from .warmup import WarmupEntry, WarmupReport, check_call_flags, check_envelope, warmup_keys
from .workspace import Workspace, as_workspace_words

__all__ = ["Dispatcher"]

logger = logging.getLogger("gvr.dispatch")

_i32 = torch.int32
_f32 = torch.float32
_Tensor = torch.Tensor
_NEG_FLT_MAX = -3.4028234663852886e38
#: compress_ratio -> log2(compress_ratio), for the common powers of two.
_SHIFTS = {1 << i: i for i in range(31)}
#: The logits dtypes the kernels read, by the name a launch key carries.
_DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
#: Row-stride mask of the kernels' vectors, by logits dtype.
_VMASK = {dt: v - 1 for dt, v in VEC.items()}


def _widen_bits(bits: torch.Tensor, dt: torch.dtype) -> torch.Tensor:
    """float32 values of 16-bit ``bits`` (int16, the raw words of ``dt`` scores), widened
    exactly, NaN sign and payload included: bfloat16 is float32's high half; float16 goes
    through the conversion, which is exact for every non-NaN value, and its NaNs are rebuilt
    from their bits (sign, all-ones exponent, the 10 payload bits at the top of float32's
    23), which the conversion does not keep on every path (a CPU conversion of a few elements
    returned ``0x7FFFFFFF`` for a negative NaN)."""
    wide = bits.to(torch.int32) & 0xFFFF
    if dt is torch.bfloat16:
        return (wide << 16).view(torch.float32)
    out = bits.view(dt).to(torch.float32)
    nan = ((wide & 0x7C00) == 0x7C00) & ((wide & 0x03FF) != 0)
    if bool(nan.any()):
        rebuilt = ((wide & 0x8000) << 16) | 0x7F800000 | ((wide & 0x03FF) << 13)
        out = torch.where(nan, rebuilt.view(torch.float32), out)
    return out


class Dispatcher:
    """Routes top-K calls to the CUDA kernels or the CPU engine (see the module docstring).

    Args:
        runtime: the CUDA runtime adapter (default :class:`~gvr_dispatch.device.CudaRuntime`).
        cache: the compile cache (default: a :class:`~gvr_dispatch.cache.KernelCache` at the
            environment's location).
    """

    def __init__(self, *, runtime=None, cache: KernelCache | None = None):
        self.runtime = runtime if runtime is not None else CudaRuntime()
        self.cache = cache if cache is not None else KernelCache()
        self._kernel_type = self.runtime.kernel_device_type
        self._is_kernel_tensor = operator.attrgetter(f"is_{self._kernel_type}")
        self._kernel_arg = getattr(self.runtime, "kernel_arg", None)
        self._launches: dict[LaunchKey, Launch] = {}
        self._specs: dict = {}
        self._dummies: dict[int, Dummies] = {}
        self._stream_ws: dict[tuple[int, int], Workspace] = {}
        self._graph_ws: dict[int, Workspace] = {}
        self._engaged: set[str] = set()
        self._warned: set[str] = set()
        self._cpu_warm = False
        # CPU tensors take the CPU path's direct entry once the engine has run (the first
        # call takes the general path, which logs and announces the compile), unless the
        # kernels run on the CPU device (the test runtime's stand-in): then they must reach
        # the kernels. Set by _cpu() and _warmup_cpu().
        self._cpu_direct_ok = False
        # One visible device: every tensor's device is the current one (no guard to check).
        self._one_device = False
        self._lock = threading.RLock()

    # ================================================================== public entry points
    def topk_decode(
        self,
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
        """Decode top-K; see :func:`gvr_dispatch.topk_decode`."""
        res = self._decode_fast(
            logits, kv_lens, k, next_n, compress_ratio, out, values, return_values,
            max_seq_len, workspace, deterministic, sorted, block_max,
        )  # fmt: skip
        if res is not None:
            return res
        return self._decode(
            logits, kv_lens, k, next_n, compress_ratio, out, values, return_values,
            max_seq_len, workspace, deterministic, sorted, block_max,
        )  # fmt: skip

    def _decode_fast(
        self, logits, kv_lens, k, next_n, compress_ratio, out, values, return_values,
        max_seq_len, workspace, deterministic, sorted, block_max=None,
    ):  # fmt: skip
        """The common warm decode call, checked inline in one function: CUDA tensors of the
        right dtypes, a warmed launch key, a layout read in place, no ``sorted``, no caller
        workspace.

        Returns the result, or None when anything differs; :meth:`_decode` then validates,
        explains errors and handles every case. Every condition below is one the general
        path checks too, so this path accepts a subset of what that one accepts and does the
        same launch for it.
        """
        if (
            (max_seq_len is not None and type(max_seq_len) is not int)
            or type(next_n) is not int
            or type(compress_ratio) is not int
            or workspace is not None
            or sorted is not False
            or (return_values is not False and return_values is not True)
            or (deterministic is not False and deterministic is not True)
            or not isinstance(logits, _Tensor)
            or not isinstance(kv_lens, _Tensor)
            or (dtype := _DTYPE_NAMES.get(logits.dtype)) is None
            or kv_lens.dtype is not _i32
        ):
            return None
        # Device checks on plain ints (get_device: the CUDA index, -1 on the CPU) and one bool
        # attribute: torch.device objects and their .type cost far more on this path.
        if not self._is_kernel_tensor(logits):
            return None
        dev = logits.get_device()
        if kv_lens.get_device() != dev:
            return None
        shape = logits.shape
        if len(shape) != 2 or kv_lens.dim() != 1:
            return None
        rows, width = shape
        batch = kv_lens.shape[0]
        cr_shift = _SHIFTS.get(compress_ratio)
        if (
            cr_shift is None
            or next_n < 1
            or batch * next_n != rows
            or rows == 0
            or not 0 < width < KERNEL_MAX_WIDTH
            or (batch > 1 and kv_lens.stride(0) != 1)
        ):
            return None
        if k is None:
            buf = out if out is not None else values
            if not isinstance(buf, _Tensor) or buf.dim() != 2:
                return None
            k = buf.shape[1]
        elif type(k) is not int:
            return None
        if not 1 <= k <= KERNEL_MAX_K:
            return None
        if out is not None and (
            not isinstance(out, _Tensor)
            or out.dtype is not _i32
            or out.get_device() != dev
            or out.shape != (rows, k)
            or not out.is_contiguous()
        ):
            return None
        if values is not None and (
            not isinstance(values, _Tensor)
            or values.dtype is not logits.dtype
            or values.get_device() != dev
            or values.shape != (rows, k)
            or not values.is_contiguous()
            or (values.requires_grad and torch.is_grad_enabled())  # refused by the checks
            or (
                out is not None
                and out.untyped_storage().data_ptr() == values.untyped_storage().data_ptr()
            )
        ):
            return None
        want_values = return_values or values is not None
        skip = block_max is not None
        if skip and (
            not isinstance(block_max, _Tensor)
            or block_max.dtype is not _f32
            or block_max.get_device() != dev
            or block_max.shape != (rows, (width + BLOCK - 1) // BLOCK)
            or block_max.stride(1) != 1
        ):
            return None
        if skip and debug_enabled():
            return None
        if dev < 0:  # a kernel device without an index (the CPU stand-in of the tests)
            dev = self.runtime.current_index()
        if max_seq_len is None:
            n_env = width
        elif 0 <= max_seq_len <= MAX_SEQ_LEN_MAX:
            n_env = min(max(max_seq_len >> cr_shift, 1), width)
        else:
            return None
        launch = self._launches.get(
            (dev, "decode", rows, n_env, k, want_values, deterministic, dtype, skip)
        )
        if launch is None:
            return None
        s0, s1 = logits.stride()
        x0 = logits.data_ptr()
        if s1 != 1 or s0 & _VMASK[logits.dtype] or x0 & 15 or logits.requires_grad:
            return None
        if out is not None or values is not None:
            # An output over the bytes the logits, kv_lens or block_max span (read while it
            # is written): the general path refuses it, naming the pair.
            esize = logits.element_size()
            x1 = x0 + esize * ((rows - 1) * s0 + width)
            p0 = kv_lens.data_ptr()
            p1 = p0 + 4 * batch  # (stride 1, or one entry)
            m0 = m1 = 0
            if skip:
                m0 = block_max.data_ptr()
                m1 = m0 + 4 * ((rows - 1) * block_max.stride(0) + block_max.shape[1])
            for buf, size in ((out, 4), (values, esize)):
                if buf is not None:
                    b0 = buf.data_ptr()
                    b1 = b0 + size * rows * k
                    if (b0 < x1 and x0 < b1) or (b0 < p1 and p0 < b1) or (b0 < m1 and m0 < b1):
                        return None
        if not self._one_device and dev != self.runtime.current_index():
            return None
        d = launch.dummies
        if launch.workspace_words:
            if self.runtime.capturing():
                ws = self._graph_ws[dev].tensor
            else:
                ws = self._stream_ws.get((dev, self.runtime.stream_key(dev)))
                if ws is None:
                    return None
                ws = ws.tensor
        else:
            ws = d.arg_workspace
        if out is None:
            out = logits.new_empty((rows, k), dtype=_i32)
        if want_values and values is None:
            values = logits.new_empty((rows, k))
        # gvr_kernels.abi.KernelArgs, positionally (a keyword-built record costs a microsecond
        # here); the dispatch tests check every launch against KernelArgs.
        launch.fn(
            logits, kv_lens, d.arg_i32, out, values if want_values else launch.dummy_values,
            ws, d.arg_i32, k, next_n, cr_shift, launch.parts,
            block_max if skip else d.arg_values,
        )  # fmt: skip
        return (out, values) if want_values else out

    def _decode(
        self, logits, kv_lens, k, next_n, compress_ratio, out, values, return_values,
        max_seq_len, workspace, deterministic, sorted, block_max=None,
    ):  # fmt: skip
        """Decode top-K, every case: validation with explained errors, the CPU engine, cold
        keys, layout fallbacks, workspaces."""
        if self._widen(logits):
            return self._half(
                lambda lg, k_, out_: self._decode(
                    lg, kv_lens, k_, next_n, compress_ratio, out_, None, False, max_seq_len,
                    workspace, deterministic, sorted, block_max,
                ),
                lambda: self._decode_checks(
                    logits, kv_lens, k, next_n, compress_ratio, out, values, return_values,
                    max_seq_len, workspace, deterministic, sorted, block_max,
                ),
                logits, k, out, values, return_values, None,
            )  # fmt: skip
        if (
            self._cpu_direct_ok
            and block_max is None
            and workspace is None
            and (
                max_seq_len is None
                or (type(max_seq_len) is int and 0 <= max_seq_len <= MAX_SEQ_LEN_MAX)
            )
        ):
            res = cpu.direct(
                cpu.WINDOW_DECODE, logits, kv_lens, None, k, next_n, compress_ratio, out,
                values, return_values, deterministic, sorted,
            )  # fmt: skip
            if res is not None:
                return res
        rows, width, kernel, next_n, cr_shift, max_seq_len, k, want_values, ws = (
            self._decode_checks(
                logits, kv_lens, k, next_n, compress_ratio, out, values, return_values,
                max_seq_len, workspace, deterministic, sorted, block_max,
            )
        )  # fmt: skip
        device = logits.device
        if rows == 0 or width == 0:
            return self._trivial(rows, k, out, values, want_values, device, logits.dtype)
        if not kernel:
            windows = cpu.decode_windows_of(kv_lens, next_n, cr_shift, width)
            return self._cpu(logits, windows, k, out, values, want_values, sorted)
        # The envelope comes from capture-stable facts only: max_seq_len, else the width
        # (every row is clamped to it). Nothing is read from kv_lens on the host.
        n_env = width if max_seq_len is None else decode_envelope(max_seq_len, cr_shift, width)
        return self._launch(
            "decode",
            logits,
            rows,
            width,
            n_env,
            kv_lens,
            None,
            k,
            next_n,
            cr_shift,
            out,
            values,
            want_values,
            deterministic,
            sorted,
            ws,
            block_max,
        )

    def _decode_checks(
        self, logits, kv_lens, k, next_n, compress_ratio, out, values, return_values,
        max_seq_len, workspace, deterministic, sorted, block_max,
    ):  # fmt: skip
        """Every check of a decode call (nothing runs or is written): ``(rows, width, kernel,
        next_n, cr_shift, max_seq_len, k, want_values, workspace)``.

        Raises:
            TypeError, ValueError: a bad argument, named in the message.
        """
        rows, width = check_logits(logits)
        device = logits.device
        kernel = device.type == self._kernel_type or self._route_device(device)
        if type(next_n) is not int or next_n < 1:
            next_n = check_next_n(next_n)
        cr_shift = _SHIFTS.get(compress_ratio) if type(compress_ratio) is int else None
        if cr_shift is None:
            cr_shift = check_compress_ratio(compress_ratio)
        batch = check_index_tensor(kv_lens, "kv_lens", device, None)
        if batch * next_n != rows:
            raise ValueError(
                f"kv_lens.numel() * next_n must equal logits.shape[0]: {batch} * {next_n} != {rows}"
            )
        if max_seq_len is not None and (
            type(max_seq_len) is not int or not 0 <= max_seq_len <= MAX_SEQ_LEN_MAX
        ):
            max_seq_len = check_max_seq_len(max_seq_len)
        k, want_values, ws = self._check_rest(
            logits, rows, width, kernel, k, out, values, return_values, deterministic, sorted,
            workspace, block_max,
            lambda: cpu.decode_windows_of(kv_lens.cpu(), next_n, cr_shift, width),
            (kv_lens, "kv_lens"),
        )  # fmt: skip
        return rows, width, kernel, next_n, cr_shift, max_seq_len, k, want_values, ws

    def topk_prefill(
        self,
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
        """Prefill top-K over row windows; see :func:`gvr_dispatch.topk_prefill`."""
        return self._prefill(
            logits, row_starts, row_ends, k, out, values, return_values, workspace,
            deterministic, sorted, block_max,
        )  # fmt: skip

    def _prefill(
        self, logits, row_starts, row_ends, k, out, values, return_values, workspace,
        deterministic, sorted, block_max=None,
    ):  # fmt: skip
        """:meth:`topk_prefill` with positional arguments (the module-level call's entry):
        the CPU path's direct entry when it applies, else validation and the general path."""
        if self._widen(logits):
            return self._half(
                lambda lg, k_, out_: self._prefill(
                    lg, row_starts, row_ends, k_, out_, None, False, workspace, deterministic,
                    sorted, block_max,
                ),
                lambda: self._prefill_checks(
                    logits, row_starts, row_ends, k, out, values, return_values, workspace,
                    deterministic, sorted, block_max,
                ),
                logits, k, out, values, return_values, row_starts,
            )  # fmt: skip
        if self._cpu_direct_ok and workspace is None and block_max is None:
            res = cpu.direct(
                cpu.WINDOW_PREFILL, logits, row_starts, row_ends, k, 1, 1, out, values,
                return_values, deterministic, sorted,
            )  # fmt: skip
            if res is not None:
                return res
        rows, width, kernel, k, want_values, ws = self._prefill_checks(
            logits, row_starts, row_ends, k, out, values, return_values, workspace,
            deterministic, sorted, block_max,
        )  # fmt: skip
        device = logits.device
        if rows == 0 or width == 0:
            return self._trivial(rows, k, out, values, want_values, device, logits.dtype)
        if not kernel:
            windows = cpu.prefill_windows_of(row_starts, row_ends, width)
            return self._cpu(logits, windows, k, out, values, want_values, sorted)
        return self._launch(
            "prefill",
            logits,
            rows,
            width,
            width,
            row_starts,
            row_ends,
            k,
            1,
            0,
            out,
            values,
            want_values,
            deterministic,
            sorted,
            ws,
            block_max,
        )

    def _prefill_checks(
        self, logits, row_starts, row_ends, k, out, values, return_values, workspace,
        deterministic, sorted, block_max,
    ):  # fmt: skip
        """Every check of a prefill call (nothing runs or is written): ``(rows, width, kernel,
        k, want_values, workspace)``.

        Raises:
            TypeError, ValueError: a bad argument, named in the message.
        """
        rows, width = check_logits(logits)
        device = logits.device
        kernel = device.type == self._kernel_type or self._route_device(device)
        check_index_tensor(row_starts, "row_starts", device, rows)
        check_index_tensor(row_ends, "row_ends", device, rows)
        k, want_values, ws = self._check_rest(
            logits, rows, width, kernel, k, out, values, return_values, deterministic, sorted,
            workspace, block_max,
            lambda: cpu.prefill_windows_of(row_starts.cpu(), row_ends.cpu(), width),
            (row_starts, "row_starts"), (row_ends, "row_ends"),
        )  # fmt: skip
        return rows, width, kernel, k, want_values, ws

    def topk(
        self,
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
        """Dense top-K; see :func:`gvr_dispatch.topk`."""
        return self._topk(
            logits, k, lengths, out, values, return_values, workspace, deterministic, sorted,
            block_max,
        )  # fmt: skip

    def _topk(
        self, logits, k, lengths, out, values, return_values, workspace, deterministic, sorted,
        block_max=None,
    ):  # fmt: skip
        """:meth:`topk` with positional arguments (the module-level call's entry): the CPU
        path's direct entry when it applies, else validation and the general path."""
        if self._widen(logits):
            return self._half(
                lambda lg, k_, out_: self._topk(
                    lg, k_, lengths, out_, None, False, workspace, deterministic, sorted,
                    block_max,
                ),  # fmt: skip
                lambda: self._topk_checks(
                    logits, k, lengths, out, values, return_values, workspace, deterministic,
                    sorted, block_max,
                ),  # fmt: skip
                logits, k, out, values, return_values, None,
            )  # fmt: skip
        if self._cpu_direct_ok and workspace is None and block_max is None:
            res = cpu.direct(
                cpu.WINDOW_FULL if lengths is None else cpu.WINDOW_LENGTHS, logits, lengths,
                None, k, 1, 1, out, values, return_values, deterministic, sorted,
            )  # fmt: skip
            if res is not None:
                return res
        rows, width, kernel, k, want_values, ws = self._topk_checks(
            logits, k, lengths, out, values, return_values, workspace, deterministic, sorted,
            block_max,
        )  # fmt: skip
        device = logits.device
        if rows == 0 or width == 0:
            return self._trivial(rows, k, out, values, want_values, device, logits.dtype)
        if not kernel:
            windows = cpu.dense_windows_of(lengths, rows, width)
            return self._cpu(logits, windows, k, out, values, want_values, sorted)
        mode = "full" if lengths is None else "decode"
        return self._launch(
            mode,
            logits,
            rows,
            width,
            width,
            lengths,
            None,
            k,
            1,
            0,
            out,
            values,
            want_values,
            deterministic,
            sorted,
            ws,
            block_max,
        )

    def _topk_checks(
        self, logits, k, lengths, out, values, return_values, workspace, deterministic, sorted,
        block_max,
    ):  # fmt: skip
        """Every check of a dense call (nothing runs or is written): ``(rows, width, kernel,
        k, want_values, workspace)``.

        Raises:
            TypeError, ValueError: a bad argument, named in the message.
        """
        rows, width = check_logits(logits)
        device = logits.device
        kernel = device.type == self._kernel_type or self._route_device(device)
        if lengths is not None:
            check_index_tensor(lengths, "lengths", device, rows)
        k, want_values, ws = self._check_rest(
            logits, rows, width, kernel, k, out, values, return_values, deterministic, sorted,
            workspace, block_max,
            lambda: cpu.dense_windows_of(None if lengths is None else lengths.cpu(), rows, width),
            (lengths, "lengths"),
        )  # fmt: skip
        return rows, width, kernel, k, want_values, ws

    def _check_rest(
        self, logits, rows, width, kernel, k, out, values, return_values, deterministic, sorted,
        workspace, block_max, windows, *inputs,
    ):  # fmt: skip
        """The checks every entry ends with, after its own inputs': flags, K and the output
        buffers (:meth:`_check_common`), the workspace, ``block_max`` (``windows()``: the
        rows' windows for its debug check) and the outputs apart from ``inputs`` (``(tensor
        or None, name)`` pairs) and ``block_max``; returns ``(k, want_values, workspace)``.

        Raises:
            TypeError, ValueError: a bad argument, named in the message.
        """
        device = logits.device
        k, want_values = self._check_common(
            k, out, values, return_values, deterministic, sorted, device, rows, width, kernel,
            logits,
        )  # fmt: skip
        ws = None if workspace is None else self._check_workspace(workspace, device, kernel)
        if block_max is not None:
            self._check_block_max(block_max, logits, rows, width, windows)
        self._check_apart(out, values, *inputs, (block_max, "block_max"))
        return k, want_values, ws

    # ================================================================== 16-bit logits
    def _widen(self, logits) -> bool:
        """Whether a call takes the float32 widening of :meth:`_half`: 16-bit logits off the
        kernel device (the CPU engine reads float32). On the kernel device the kernels read
        16-bit logits in place (their 16-bit configurations)."""
        return (
            isinstance(logits, _Tensor)
            and logits.dtype in HALF_DTYPES
            and not self._is_kernel_tensor(logits)
        )

    def _half(self, call, check, logits, k, out, values, return_values, starts):
        """A bfloat16 / float16 call off the kernel device (the CPU engine), through an exact
        float32 widening of the logits.

        Widening is exact and order-preserving for both formats (every bfloat16 and float16
        value, subnormals, signed zeros, infinities and NaN, is a float32 value; distinct
        values stay distinct), so the float32 selection of the widened copy is the exact
        top-K of the 16-bit row, ties and all. The copy goes into a buffer whose row pitch is
        a multiple of 4 elements, so the kernels read it in place (also under CUDA-graph
        capture, from the graph's pool). Values are gathered from the 16-bit logits by index
        (bit for bit) into the logits dtype, or into a float32 ``values`` buffer when one is
        given; the pad beside ``-1`` is the dtype's most negative finite value.

        ``call(logits32, k, out)`` is the float32 entry with everything else bound;
        ``check()`` runs the entry's checks of the whole call on the 16-bit logits (they take
        16-bit logits and their values buffers), so every argument is checked before the
        widened copy is made or anything is written. ``starts``: the prefill ``row_starts``
        (indices are window-local), else None.
        """
        check()
        k = resolve_k(k, out, values)  # (checked: the float32 call needs it without values)
        rows, width = logits.shape
        if logits.is_neg():
            # (a lazily negated view: its memory is not its values; the widening reads bits)
            logits = logits.resolve_neg()
        dt = logits.dtype
        out = call(padded_copy(logits, rows, width), k, out)
        if not (return_values or values is not None):
            return out
        vdt = _f32 if values is not None and values.dtype is _f32 else dt
        pad = torch.finfo(vdt).min
        if width == 0:
            picked = torch.full(out.shape, pad, dtype=vdt, device=out.device)
        else:
            pos = out.long()
            if starts is not None:
                # window-local indices count from the clamped start (as the kernels do)
                pos = pos + starts.long().clamp(0, width)[:, None]
            # Gathered through the integer view: bit for bit (NaN payloads included).
            bits = torch.gather(logits.view(torch.int16), 1, pos.clamp(0, width - 1))
            picked = bits.view(dt) if vdt is dt else _widen_bits(bits, dt)
            picked.masked_fill_(out < 0, pad)
        if values is not None:
            values.copy_(picked)
            picked = values
        return out, picked

    # ================================================================== checks
    def _route_device(self, device) -> bool:
        """True when ``device`` runs the kernels, False for the CPU engine."""
        t = device.type
        if t == self._kernel_type:
            return True
        if t == "cpu":
            return False
        raise ValueError(f"logits must be a CPU or CUDA tensor, got device {device}")

    def _check_common(
        self, k, out, values, return_values, deterministic, sorted, device, rows, width, kernel,
        logits,
    ) -> tuple[int, bool]:  # fmt: skip
        """Flags, K, the output buffers (apart from each other and from ``logits``) and the
        kernels' limits; returns ``(k, want_values)``."""
        dtype = logits.dtype
        # The identity tests are the common case; check_flag explains anything else.
        if return_values is not False and return_values is not True:
            check_flag(return_values, "return_values")
        if deterministic is not False and deterministic is not True:
            check_flag(deterministic, "deterministic")
        if sorted is not False and sorted is not True:
            check_flag(sorted, "sorted")
        if type(k) is not int or k < 1:
            k = resolve_k(k, out, values)
        if not kernel and k > CPU_MAX_K:
            check_cpu_k(k)
        if kernel:
            if k > KERNEL_MAX_K:
                check_kernel_k(k)
            if width >= KERNEL_MAX_WIDTH:
                check_kernel_width(width)
        if out is not None:
            check_output(out, "out", _i32, device, rows, k)
        if values is not None:
            # float32 values for float32 logits; for 16-bit logits the logits dtype, or a
            # float32 buffer the values are widened into
            ok = (dtype, _f32)
            if dtype is not _f32 and isinstance(values, _Tensor) and values.dtype not in ok:
                raise TypeError(half_values_message(dtype, values.dtype))
            vdt = values.dtype if isinstance(values, _Tensor) and values.dtype in ok else dtype
            check_output(values, "values", vdt, device, rows, k)
            if out is not None:
                check_disjoint(out, "out", values, "values")
        self._check_apart(out, values, (logits, "logits"))
        return k, return_values or values is not None

    @staticmethod
    def _check_apart(out, values, *inputs) -> None:
        """The output buffers must not share memory with an input read while they are written
        (``inputs``: ``(tensor or None, name)`` pairs: the logits, an index input, the block
        maxima; an ``out`` over ``kv_lens`` would overwrite later rows' lengths before they
        are read).

        Raises:
            ValueError: one does (naming both).
        """
        for buf, name in ((out, "out"), (values, "values")):
            if buf is None:
                continue
            for t, tname in inputs:
                if t is not None:
                    read = "the logits are" if tname == "logits" else f"{tname} is"
                    check_disjoint(buf, name, t, tname, f"{read} read while it is written")

    def _check_block_max(self, block_max, logits, rows, width, windows) -> None:
        """Validate ``block_max`` (``gvr_dispatch.blockmax``); in debug mode
        (``GVR_CHECK_BLOCK_MAX``) also check its contract on the rows' windows
        (``windows()``: their ``RowWindows``, read on the host)."""
        check_block_max(block_max, logits.device, rows, width)
        if debug_enabled():
            if logits.device.type != "cpu" and self.runtime.capturing():
                raise RuntimeError(
                    f"gvr: {DEBUG_ENV} asks for the block_max contract check, which reads the "
                    f"device and cannot run during CUDA-graph capture; unset it to capture"
                )
            w = windows()
            dev = logits.device
            raise_on_violations(
                logits, block_max, torch.as_tensor(w.starts, device=dev),
                torch.as_tensor(w.lengths, device=dev),
            )  # fmt: skip

    @staticmethod
    def _check_workspace(workspace, device, kernel):
        """The caller's workspace as uint32 words (size checked at launch), or ``None``.
        CPU calls ignore it."""
        if workspace is None:
            return None
        if not kernel:  # unused on the CPU, but a wrong type is still an error
            if not isinstance(workspace, (Workspace, _Tensor)):
                as_workspace_words(workspace, "workspace", device, 0)  # raises TypeError
            return None
        return as_workspace_words(workspace, "workspace", device, 0)

    # ================================================================== trivial and CPU
    @staticmethod
    def _trivial(rows, k, out, values, want_values, device, dtype=_f32):
        """No launch: zero rows, or zero columns (every row empty); values in ``dtype`` (the
        logits dtype) unless a buffer is given, padded with its most negative finite value."""
        if out is None:
            out = torch.empty((rows, k), dtype=_i32, device=device)
        if want_values and values is None:
            values = torch.empty((rows, k), dtype=dtype, device=device)
        if rows:
            out.fill_(-1)
            if values is not None:
                values.fill_(torch.finfo(values.dtype).min)
        return (out, values) if want_values else out

    def _cpu(self, logits, windows, k, out, values, want_values, sorted):
        if not self._cpu_warm:
            self._cpu_warm = True
            self._cpu_direct_ok = self._kernel_type != "cpu"
            logger.info("gvr: CPU tensors run on the CPU path (the numba engine)")
        out, values = cpu.outputs(logits.shape[0], k, out, values, want_values)
        cpu.run_cpu(logits, windows, k, out, values, sorted)
        return (out, values) if want_values else out

    # ================================================================== kernel launches
    def _launch(
        self,
        mode,
        logits,
        rows,
        width,
        n_env,
        lens_a,
        lens_b,
        k,
        next_n,
        cr_shift,
        out,
        values,
        want_values,
        deterministic,
        sorted,
        ws,
        block_max=None,
    ):
        # The capture status costs a CUDA call, so it is asked only where it changes the
        # outcome: a cold key, a layout copy, a split launch's workspace.
        runtime = self.runtime
        device = logits.device
        dev = device.index
        if dev is None:  # a kernel device without an index (the CPU stand-in of the tests)
            dev = runtime.current_index()
        kernel_values = want_values or sorted
        dt = logits.dtype
        key = LaunchKey(
            dev, mode, rows, n_env, k, kernel_values, deterministic, _DTYPE_NAMES[dt],
            block_max is not None,
        )  # fmt: skip
        launch = self._launches.get(key)
        if launch is None:
            if runtime.capturing():
                raise RuntimeError(
                    f"gvr: no kernel is warmed for launch key {describe_key(key)}, and nothing "
                    f"can be compiled during CUDA-graph capture; call gvr_dispatch.warmup("
                    f"k={k}, rows=({rows},), modes=(...), max_seq_len=..., with_values="
                    f"{kernel_values}, deterministic={deterministic}"
                    f"{', block_max=True' if block_max is not None else ''}, ...) with the "
                    f"envelope of your calls (or run the call once eagerly) before capturing"
                )
            launch = self._resolve(key, device)

        s0, s1 = logits.stride()
        vmask = _VMASK[dt]
        if s1 == 1 and not s0 & vmask and not logits.data_ptr() & 15 and not logits.requires_grad:
            view = logits  # the common layout, read in place
        else:
            view, issue = kernel_view(logits, rows, width)
            if view is None:
                view = self._layout_fallback(logits, rows, width, issue, runtime.capturing())

        if launch.workspace_words:
            if ws is not None:
                if ws.shape[0] < launch.workspace_words:
                    raise ValueError(
                        f"workspace is too small: this launch needs "
                        f"{4 * launch.workspace_words} bytes, got {4 * ws.shape[0]}"
                    )
            elif runtime.capturing():
                ws = self._graph_ws[dev].tensor
            else:
                ws = self._stream_workspace(dev, device).tensor
        else:
            ws = launch.dummies.arg_workspace

        if out is None:
            out = torch.empty((rows, k), dtype=_i32, device=device)
        widen_into = None
        if kernel_values and values is not None and values.dtype is not dt:
            # 16-bit logits, float32 values: the kernel writes the logits dtype, widened after
            widen_into, values = values, None
        if kernel_values and values is None:
            values = torch.empty((rows, k), dtype=dt, device=device)
        d = launch.dummies
        args = (  # gvr_kernels.abi.KernelArgs, positionally (see _decode_fast)
            view,
            lens_a if lens_a is not None else d.arg_i32,
            lens_b if lens_b is not None else d.arg_i32,
            out,
            values if kernel_values else launch.dummy_values,
            ws,
            d.arg_i32,
            k,
            next_n,
            cr_shift,
            launch.parts,
            d.arg_values if block_max is None else block_max,
        )
        if dev == runtime.current_index():
            launch.fn(*args)
        else:  # the kernel loads and launches in the current device's context
            with runtime.device_guard(dev):
                launch.fn(*args)
        if sorted:
            sort_rows_(out, values)
        if widen_into is not None:
            # widened exactly; the pad beside -1 is the float32 buffer's own (-FLT_MAX)
            widen_into.copy_(values)
            widen_into.masked_fill_(out < 0, _NEG_FLT_MAX)
            values = widen_into
        return (out, values) if want_values else out

    def _layout_fallback(self, logits, rows, width, issue, capturing):
        strides = tuple(logits.stride())
        if capturing:
            raise RuntimeError(
                f"gvr: logits with strides {strides} at address {logits.data_ptr():#x} "
                f"({issue}) need a copy into an aligned buffer, which cannot happen during "
                f"CUDA-graph capture; give the kernels a unit inner stride, a row stride that "
                f"is a multiple of {VEC[logits.dtype]} elements and a 16-byte-aligned base"
            )
        if issue not in self._warned:
            self._warned.add(issue)
            logger.warning(
                "gvr: logits with strides %s (%s) cannot be read in place by the kernels; "
                "copying into an aligned buffer (slower). The kernels need a unit inner "
                "stride, a row stride that is a multiple of 4 elements and a 16-byte-aligned "
                "base (8 elements for bfloat16 / float16).",
                strides,
                issue,
            )
        return padded_copy(logits, rows, width, logits.dtype)

    def _resolve(self, key: LaunchKey, device) -> Launch:
        """Compile or load the kernel of ``key``, allocate what it needs, remember it."""
        with self._lock:
            launch = self._launches.get(key)
            if launch is not None:
                return launch
            dev = key[0]
            spec = self.spec(device)
            self._one_device = self.runtime.device_count() == 1
            r = route(spec, key)
            config = r.config
            entry, source = self.cache.get(config, spec.arch)
            if r.workspace_words:
                self._stream_workspace(dev, device)
                self._graph_workspace(dev, device)
            dummies = self._dummies_for(dev, device)
            launch = Launch(
                fn=entry.fn,
                route=r,
                arch=spec.arch,
                parts=r.parts,
                workspace_words=r.workspace_words,
                dummies=dummies,
                dummy_values=dummies.arg_values_of(getattr(torch, key.dtype)),
            )
            self._launches[key] = launch
            self._engage(config.name, spec.arch, source, entry.seconds)
            return launch

    def _engage(self, name: str, arch: str, source: str, seconds: float) -> None:
        if name in self._engaged:
            return
        self._engaged.add(name)
        how = {"memory": "in memory", "disk": "loaded from disk", "compiled": "compiled"}[source]
        logger.info("gvr: kernel %s for %s engaged (%s, %.2f s)", name, arch, how, seconds)

    # ================================================================== devices and buffers
    def spec(self, device=None):
        """The :class:`~gvr_kernels.spec.DeviceSpec` of a CUDA device (read once from the
        driver, then cached). ``device``: a ``torch.device``, an index, or ``None`` (current)."""
        device = self._device(device)
        dev = self.runtime.index(device)
        spec = self._specs.get(dev)
        if spec is None:
            spec = self._specs[dev] = self.runtime.device_spec(dev)
        return spec

    def _device(self, device):
        if device is None:
            return self.runtime.current_device()
        if isinstance(device, int) and not isinstance(device, bool):
            return torch.device(self._kernel_type, device)
        try:
            device = torch.device(device)
        except (RuntimeError, TypeError) as e:
            raise ValueError(f"device must be a CPU or CUDA device, got {device!r}") from e
        if device.type == self._kernel_type and device.index is None:
            return self.runtime.current_device()
        return device

    def _dummies_for(self, dev: int, device) -> Dummies:
        d = self._dummies.get(dev)
        if d is None:
            d = self._dummies[dev] = Dummies.allocate(device, self._kernel_arg)
        return d

    def _stream_workspace(self, dev: int, device, stream_key: int | None = None) -> Workspace:
        if stream_key is None:
            stream_key = self.runtime.stream_key(dev)
        ws = self._stream_ws.get((dev, stream_key))
        if ws is None:
            if self.runtime.capturing():
                raise RuntimeError(
                    "gvr: the split workspace of this stream would be allocated during "
                    "CUDA-graph capture; call gvr_dispatch.warmup(...) or "
                    "gvr_dispatch.workspace_for() before capturing"
                )
            with self._lock:
                ws = self._stream_ws.get((dev, stream_key))
                if ws is None:
                    words = max_workspace_words(self.spec(device))
                    ws = self._stream_ws[(dev, stream_key)] = Workspace.zeros(words, device)
        return ws

    def _graph_workspace(self, dev: int, device) -> Workspace:
        ws = self._graph_ws.get(dev)
        if ws is None:
            words = max_workspace_words(self.spec(device))
            ws = self._graph_ws[dev] = Workspace.zeros(words, device)
        return ws

    def workspace_for(self, device=None, stream=None) -> Workspace:
        """The dispatcher's split workspace of ``(device, stream)`` (default: the current
        device and its current stream), allocated on first request.

        Raises:
            RuntimeError: it does not exist yet and the current stream is capturing a graph.
        """
        device = self._device(device)
        dev = self.runtime.index(device)
        key = None if stream is None else self.runtime.stream_key_of(stream)
        return self._stream_workspace(dev, device, key)

    def workspace_bytes(self, device=None) -> int:
        """Bytes of workspace the largest split launch on ``device`` needs (what a
        caller-provided ``workspace=`` should hold to serve every call)."""
        return 4 * max_workspace_words(self.spec(device))

    # ================================================================== warmup
    def warmup(
        self,
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
        dtype=_f32,
        block_max=False,
    ) -> WarmupReport:
        """Make every launch inside an envelope of calls ready; see :func:`gvr_dispatch.warmup`."""
        t0 = time.perf_counter()
        if cache_dir is not FROM_ENV:
            self.cache.set_cache_dir(cache_dir)
        progress = check_flag(progress, "progress")
        next_n = check_next_n(next_n)
        cr_shift = check_compress_ratio(compress_ratio)
        max_seq_len = check_max_seq_len(max_seq_len)
        dtypes = _dtype_names(dtype)
        if spec is None:
            if device is None:
                device = self.runtime.current_device() if self._kernels_available() else "cpu"
            device = self._device(device)
            if device.type == "cpu" and self._kernel_type != "cpu":
                # The CPU engine compiles nothing (and takes any K), but the flags and shapes
                # are checked as for a GPU.
                _, row_counts, modes_, *_ = check_call_flags(
                    k, rows, modes, with_values, deterministic, block_max, False
                )
                check_envelope(width, row_stride, row_counts, modes_, next_n, max_seq_len)
                return self._warmup_cpu(t0)
            if device.type != self._kernel_type:
                raise ValueError(f"device must be a CPU or CUDA device, got {device}")
            dev = self.runtime.index(device)
            spec = self.spec(device)
        elif device is not None:
            raise ValueError("pass either device (warm a GPU) or spec (compile only), not both")
        else:
            dev = -1
        keys, notes = warmup_keys(
            dev,
            k=k,
            rows=rows,
            next_n=next_n,
            cr_shift=cr_shift,
            max_seq_len=max_seq_len,
            width=width,
            row_stride=row_stride,
            modes=modes,
            with_values=with_values,
            deterministic=deterministic,
            dtypes=dtypes,
            block_skip=block_max,
        )
        configs = list(dict.fromkeys(route(spec, key).config for key in keys))
        report = WarmupReport(device=str(device) if dev >= 0 else spec.arch, notes=notes)
        bar = _progress(configs, progress, spec.arch)
        for config in bar:
            if hasattr(bar, "set_postfix_str"):
                bar.set_postfix_str(config.name, refresh=False)
            t = time.perf_counter()
            entry, source = self.cache.get(config, spec.arch)
            report.entries.append(
                WarmupEntry(config.name, spec.arch, source, time.perf_counter() - t)
            )
            if dev >= 0:
                self._engage(config.name, spec.arch, source, entry.seconds)
        if hasattr(bar, "close"):
            bar.close()
        if dev >= 0:
            if self.runtime.capturing():
                raise RuntimeError("gvr: warmup cannot run during CUDA-graph capture")
            primed = set()
            with self.runtime.device_guard(dev):
                for key in keys:
                    launch = self._resolve(key, device)
                    if launch.config not in primed:
                        primed.add(launch.config)
                        prime(launch, device)
            self.runtime.synchronize(device)
            report.launch_keys = len(keys)
            report.workspace_bytes = sum(
                w.nbytes for (d, _), w in self._stream_ws.items() if d == dev
            ) + (self._graph_ws[dev].nbytes if dev in self._graph_ws else 0)
        report.seconds = time.perf_counter() - t0
        logger.info("%s", str(report).splitlines()[0])
        return report

    def _kernels_available(self) -> bool:
        try:
            self.runtime.current_device()
        except RuntimeError:
            return False
        return True

    def _warmup_cpu(self, t0: float) -> WarmupReport:
        t = time.perf_counter()
        source = "memory" if self._cpu_warm else cpu_engine.warmup()
        self._cpu_warm = True
        self._cpu_direct_ok = self._kernel_type != "cpu"
        report = WarmupReport(device="cpu")
        report.entries.append(WarmupEntry("cpu_engine", "cpu", source, time.perf_counter() - t))
        report.seconds = time.perf_counter() - t0
        return report

    # ================================================================== introspection
    def launch_keys(self) -> list[LaunchKey]:
        """The launch keys resolved so far."""
        return list(self._launches)

    def set_cache_dir(self, cache_dir) -> None:
        """Use ``cache_dir`` for the persistent compile cache (``None``: none)."""
        self.cache.set_cache_dir(cache_dir)


def _dtype_names(dtype) -> tuple[str, ...]:
    """Names of a warmup's logits dtypes: one torch dtype or a tuple of them.

    Raises:
        TypeError: anything but float32, bfloat16 or float16.
    """
    items = dtype if isinstance(dtype, (tuple, list)) else (dtype,)
    names = []
    for dt in items:
        name = _DTYPE_NAMES.get(dt) if isinstance(dt, torch.dtype) else None
        if name is None:
            raise TypeError(
                f"dtype must be torch.float32, torch.bfloat16 or torch.float16 (or a tuple of "
                f"them), got {dt!r}"
            )
        names.append(name)
    if not names:
        raise ValueError("dtype must not be empty")
    return tuple(dict.fromkeys(names))


def _progress(configs, enabled: bool, arch: str):
    if not enabled:
        return configs
    try:
        from tqdm.auto import tqdm
    except ImportError:  # tqdm is a dependency; a stripped install still warms up
        return configs
    return tqdm(configs, desc=f"gvr warmup ({arch})", unit="kernel", leave=False)
