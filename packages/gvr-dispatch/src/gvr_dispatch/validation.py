"""Argument checks of the public API: explicit, before anything runs or is written.

Every check raises

- ``TypeError`` for a wrong Python type or tensor dtype,
- ``ValueError`` for a wrong shape, device, layout or value,

with a message that names the argument and the offending value, e.g.
``ValueError("next_n must be >= 1, got 0")``. The functions read tensor metadata only (shape,
strides, dtype, device, address), never tensor data, so they are safe under CUDA-graph capture
and cost no device synchronisation. Data-dependent conditions (negative lengths, windows
outside the row) are not errors: the kernels clamp them (see ``docs/api.md``).
"""

from __future__ import annotations

import numbers

import torch
from gvr_reference.windows import MAX_COMPRESS_RATIO

__all__ = [
    "MAX_COMPRESS_RATIO",
    "CPU_MAX_K",
    "KERNEL_MAX_K",
    "KERNEL_MAX_WIDTH",
    "check_logits",
    "check_index_tensor",
    "check_flag",
    "check_int",
    "check_next_n",
    "check_compress_ratio",
    "check_max_seq_len",
    "resolve_k",
    "check_kernel_k",
    "check_kernel_width",
    "check_cpu_k",
    "check_output",
    "check_disjoint",
    "shares_storage",
]

#: Largest K the CUDA kernels serve (the CPU engine takes any K >= 1).
KERNEL_MAX_K = 2048
#: Largest K on the CPU: the indices are int32 (a K past the row width only adds -1 padding).
CPU_MAX_K = (1 << 31) - 1
#: Rows of the CUDA kernels hold fewer than this many scores.
KERNEL_MAX_WIDTH = 1 << 26

_f32 = torch.float32
_i32 = torch.int32


def _what(x: object) -> str:
    if isinstance(x, torch.Tensor):
        return f"Tensor of dtype {x.dtype}"
    t = type(x)
    # (qualified outside the builtins: numpy's bool is also named "bool")
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def check_int(value: object, name: str) -> int:
    """``value`` as a Python int (``bool`` is rejected).

    Raises:
        TypeError: not an integer.
    """
    if type(value) is int:  # the common case, without the ABC check
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {_what(value)} {value!r}")
    return int(value)


def check_flag(value: object, name: str) -> bool:
    """``value`` as a bool.

    Raises:
        TypeError: not a bool.
    """
    if value is True or value is False:
        return value
    raise TypeError(f"{name} must be a bool, got {_what(value)} {value!r}")


#: The 16-bit logits dtypes the entry points take besides float32.
HALF_DTYPES = (torch.bfloat16, torch.float16)


def check_logits(logits: object) -> tuple[int, int]:
    """Check that ``logits`` is a 2-D float32, bfloat16 or float16 tensor.

    Layout (strides, alignment) is not an error: ``gvr_dispatch.launch.kernel_view`` says
    whether the kernels can address it in place.

    Returns:
        ``(rows, width)``.

    Raises:
        TypeError: not a tensor, another dtype (float64, integers, ...), or not a strided
            (dense) tensor (sparse, mkldnn).
        ValueError: not 2-D.
    """
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"logits must be a torch.Tensor, got {_what(logits)}")
    if logits.dtype is not _f32 and logits.dtype not in HALF_DTYPES:
        raise TypeError(f"logits must be float32, bfloat16 or float16, got {logits.dtype}")
    if logits.layout is not torch.strided:
        raise TypeError(f"logits must be a dense (strided) tensor, got layout {logits.layout}")
    shape = logits.shape
    if len(shape) != 2:
        raise ValueError(f"logits must be 2-D [rows, width], got shape {tuple(shape)}")
    return shape[0], shape[1]


def check_index_tensor(x: object, name: str, device: torch.device, numel: int | None) -> int:
    """Check a per-row or per-request int32 input (``kv_lens``, ``row_starts``, ...): a 1-D
    contiguous int32 tensor on ``device``, of ``numel`` entries unless ``numel`` is None.

    Returns:
        Its length.

    Raises:
        TypeError: not a tensor, or not int32.
        ValueError: wrong device, rank, length or a non-unit stride.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {_what(x)}")
    if x.dtype is not _i32:
        raise TypeError(f"{name} must be int32, got {x.dtype}")
    if x.device != device:
        raise ValueError(f"{name} must be on the logits device {device}, got {x.device}")
    if x.dim() != 1:
        raise ValueError(f"{name} must be 1-D, got shape {tuple(x.shape)}")
    n = x.shape[0]
    if numel is not None and n != numel:
        raise ValueError(f"{name} must have {numel} entries, got {n}")
    if n > 1 and x.stride(0) != 1:
        raise ValueError(f"{name} must be contiguous, got stride {x.stride(0)}")
    return n


def check_next_n(next_n: object) -> int:
    """Rows per request (MTP draft tokens + 1).

    Raises:
        TypeError: not an int.
        ValueError: ``next_n < 1``.
    """
    next_n = check_int(next_n, "next_n")
    if next_n < 1:
        raise ValueError(f"next_n must be >= 1, got {next_n}")
    return next_n


def check_compress_ratio(compress_ratio: object) -> int:
    """KV compression ratio: a power of two in ``[1, MAX_COMPRESS_RATIO]`` (``kv_lens`` are
    int32, so a larger ratio could only leave every row empty; the kernels take the shift as an
    int32).

    Returns:
        ``log2(compress_ratio)`` (the kernels take the shift).

    Raises:
        TypeError: not an int.
        ValueError: not a power of two in that range.
    """
    cr = check_int(compress_ratio, "compress_ratio")
    if cr < 1 or cr & (cr - 1) or cr > MAX_COMPRESS_RATIO:
        raise ValueError(
            f"compress_ratio must be a power of two in [1, {MAX_COMPRESS_RATIO}], got {cr}"
        )
    return cr.bit_length() - 1


#: Largest ``max_seq_len`` (an int64, as the torch ops take it).
MAX_SEQ_LEN_MAX = (1 << 63) - 1


def check_max_seq_len(max_seq_len: object) -> int | None:
    """The decode length envelope in uncompressed tokens: ``None`` or an int in
    ``[0, MAX_SEQ_LEN_MAX]``.

    Raises:
        TypeError: not an int.
        ValueError: negative, or past an int64.
    """
    if max_seq_len is None:
        return None
    m = check_int(max_seq_len, "max_seq_len")
    if m < 0:
        raise ValueError(f"max_seq_len must be >= 0, got {m}")
    if m > MAX_SEQ_LEN_MAX:
        raise ValueError(f"max_seq_len must be at most 2**63 - 1 (an int64), got {m}")
    return m


def resolve_k(k: object, out: object, values: object) -> int:
    """K from the ``k`` argument, else from the width of ``out`` (or ``values``).

    Whether ``k`` agrees with the buffers is checked by :func:`check_output`.

    Raises:
        TypeError: ``k`` is not an int, none of the three gives K, or ``k`` is left out and
            the first buffer given is not a tensor.
        ValueError: ``k < 1``, or ``k`` is left out and the first buffer given is not 2-D, or
            ``out`` and ``values`` (2-D) differ in width.
    """
    if k is None:
        for buf, name in ((out, "out"), (values, "values")):
            if buf is None:
                continue
            if not isinstance(buf, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor [rows, k], got {_what(buf)}")
            if buf.dim() != 2:
                raise ValueError(f"{name} must be 2-D [rows, k], got shape {tuple(buf.shape)}")
            k = buf.shape[1]
            if k < 1:
                raise ValueError(f"k must be >= 1, got {name}.shape[1] = {k}")
            if (
                name == "out"
                and isinstance(values, torch.Tensor)
                and values.dim() == 2
                and values.shape[1] != k
            ):
                raise ValueError(
                    f"values.shape[1]={values.shape[1]} disagrees with out.shape[1]={k} "
                    "(k is left out, so the buffers give it)"
                )
            return k
        raise TypeError("k is required unless out or values gives it (out.shape[1])")
    k = check_int(k, "k")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    return k


def check_kernel_k(k: int) -> None:
    """The CUDA kernels serve ``1 <= k <= 2048``.

    Raises:
        ValueError: ``k`` out of range.
    """
    if k > KERNEL_MAX_K:
        raise ValueError(
            f"k must be <= {KERNEL_MAX_K} for CUDA tensors, got {k} (the CPU engine takes any k)"
        )


def check_cpu_k(k: int) -> None:
    """The CPU path serves ``1 <= k <= 2**31 - 1`` (int32 indices).

    Raises:
        ValueError: ``k`` out of range.
    """
    if k > CPU_MAX_K:
        raise ValueError(
            f"k must be <= 2**31 - 1 for CPU tensors (int32 indices), got {k}; a k beyond the "
            f"row width only adds -1 padding"
        )


def check_kernel_width(width: int) -> None:
    """The CUDA kernels serve rows of fewer than ``2**26`` scores.

    Raises:
        ValueError: ``logits.shape[1]`` too large.
    """
    if width >= KERNEL_MAX_WIDTH:
        raise ValueError(f"logits.shape[1] must be < 2**26 for CUDA tensors, got {width}")


def check_not_grad(buf: torch.Tensor, name: str) -> None:
    """A buffer the call writes in place must not require grad while grad mode is on
    (autograd cannot follow the write; ``torch.topk(..., out=)`` refuses one too). The one
    owner of that rule: :func:`check_output`, the traced torch ops and the indexer call it.

    Raises:
        ValueError: it does, naming ``name``.
    """
    if buf.requires_grad and torch.is_grad_enabled():
        raise ValueError(
            f"{name} must not require grad: it is written in place, which autograd cannot "
            "follow (pass a buffer with requires_grad=False, or call under torch.no_grad())"
        )


def half_values_message(logits_dtype: torch.dtype, got: torch.dtype) -> str:
    """The refusal of a ``values`` buffer of another dtype than 16-bit logits allow (their
    own dtype or float32), for the dispatcher and the torch ops' fake implementations."""
    return f"values must be {logits_dtype} (the logits dtype) or torch.float32, got {got}"


def check_output(
    buf: object, name: str, dtype: torch.dtype, device: torch.device, rows: int, k: int
) -> None:
    """Check a caller-provided output buffer: a contiguous ``[rows, k]`` tensor of ``dtype`` on
    ``device``.

    Raises:
        TypeError: not a tensor, or the wrong dtype.
        ValueError: wrong device, shape, or not contiguous; or it requires grad while grad
            mode is on (the call writes it in place, which autograd cannot follow: as
            ``torch.topk(..., out=)`` refuses such a buffer).
    """
    if not isinstance(buf, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {_what(buf)}")
    if buf.dtype is not dtype:
        raise TypeError(f"{name} must be {dtype}, got {buf.dtype}")
    check_not_grad(buf, name)
    if buf.device != device:
        raise ValueError(f"{name} must be on the logits device {device}, got {buf.device}")
    shape = buf.shape
    if len(shape) != 2 or shape[0] != rows:
        raise ValueError(f"{name} must have shape ({rows}, {k}), got {tuple(shape)}")
    if shape[1] != k:
        raise ValueError(f"k={k} disagrees with {name}.shape[1]={shape[1]}")
    if not buf.is_contiguous():
        raise ValueError(f"{name} must be contiguous, got strides {buf.stride()}")


def check_disjoint(
    a: torch.Tensor, name_a: str, b: torch.Tensor, name_b: str, why: str = "both are written"
) -> None:
    """Two tensors must not share memory: an output buffer and another output (the kernels
    write both) or the logits (read while the output is written). Compares the byte ranges
    their strides can reach, so interleaved views of one allocation are refused too.

    Raises:
        ValueError: their byte ranges overlap (the message names both and ``why``).
    """
    if not shares_storage(a, b):
        return
    a0, a1 = _byte_range(a)
    b0, b1 = _byte_range(b)
    if a0 < b1 and b0 < a1:
        raise ValueError(f"{name_a} and {name_b} must not share memory ({why})")


def _byte_range(t: torch.Tensor) -> tuple[int, int]:
    """``[first, last + 1)`` byte addresses a strided tensor's elements may occupy."""
    lo = hi = 0
    if t.numel() == 0:
        return t.data_ptr(), t.data_ptr()
    for size, stride in zip(t.shape, t.stride(), strict=True):
        if stride >= 0:
            hi += (size - 1) * stride
        else:
            lo += (size - 1) * stride
    es = t.element_size()
    return t.data_ptr() + lo * es, t.data_ptr() + (hi + 1) * es


def shares_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors view one allocation (:func:`check_disjoint` then compares bytes)."""
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
