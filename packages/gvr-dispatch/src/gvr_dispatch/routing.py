"""Launch keys: what a call is routed by, built only from capture-stable quantities.

A launch key is the tuple ``(device_index, mode, rows, n_env, k, with_values, deterministic)``:

- ``mode``: the kernel's window source, ``"decode"`` (``topk_decode``, and ``topk`` with
  ``lengths``), ``"prefill"`` or ``"full"`` (``topk`` without ``lengths``);
- ``rows``: logits rows;
- ``n_env``: the length envelope (longest row the launch may see, in compressed scores):
  decode with ``max_seq_len``: ``min(max(max_seq_len // compress_ratio, 1), width)``;
  decode without it: the longest row of the batch rounded up to a power of two, clamped to
  the width (:func:`pow2_envelope`); prefill and dense: the width;
- ``with_values``: the kernel writes values (requested, or needed by ``sorted=True``);
- ``deterministic``: the tie mode.

:func:`route` turns a key into the ``gvr_reference.routing.route_static`` route and the
``StreamingConfig`` to compile, a pure function of the key and the device spec.
"""

from __future__ import annotations

from gvr_kernels.config import StreamingConfig
from gvr_reference.routing import DeviceSpec, StaticRoute, route_static

__all__ = ["LaunchKey", "decode_envelope", "pow2_envelope", "route", "describe_key"]

#: ``(device_index, mode, rows, n_env, k, with_values, deterministic)``
LaunchKey = tuple


def decode_envelope(max_seq_len: int, cr_shift: int, width: int) -> int:
    """Envelope of a decode call with ``max_seq_len`` (uncompressed tokens): the longest row
    any ``kv_lens <= max_seq_len`` can give, at least 1, at most ``width`` (``width >= 1``)."""
    return min(max(max_seq_len >> cr_shift, 1), width)


def pow2_envelope(longest: int, width: int) -> int:
    """Envelope of a decode call without ``max_seq_len``: the longest row rounded up to a power
    of two, clamped to ``width``. A growing decode then changes key only when its longest row
    doubles."""
    n = max(int(longest), 1)
    return min(1 << (n - 1).bit_length(), width)


def route(spec: DeviceSpec, key: LaunchKey) -> tuple[StaticRoute, StreamingConfig]:
    """The static route and compile configuration of a launch key on ``spec``."""
    _, mode, rows, n_env, k, with_values, deterministic = key
    r = route_static(spec, rows=rows, n_env=n_env, k=k)
    config = StreamingConfig(
        mode=mode, with_values=with_values, deterministic=deterministic, **r.config
    )
    return r, config


def describe_key(key: LaunchKey) -> str:
    """A readable form of a launch key for error messages."""
    dev, mode, rows, n_env, k, with_values, deterministic = key
    return (
        f"(device=cuda:{dev}, mode={mode}, rows={rows}, n_env={n_env}, k={k}, "
        f"with_values={with_values}, deterministic={deterministic})"
    )
