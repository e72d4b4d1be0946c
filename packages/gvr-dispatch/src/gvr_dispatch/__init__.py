"""gvr-dispatch: the public GVR top-K API.

``topk_decode``, ``topk_prefill`` and ``topk`` run exact top-K on CUDA tensors with the GVR
kernels and on CPU tensors with the numba CPU engine; ``warmup`` compiles (or loads from the
persistent cache) every kernel an envelope of calls can need, before CUDA-graph capture.
See ``docs/api.md``.
"""

import logging

from ._torch import require_torch

require_torch("gvr-dispatch")

from .api import (  # noqa: E402  (after the torch check, which explains a missing torch)
    device_spec,
    get_dispatcher,
    set_cache_dir,
    topk,
    topk_decode,
    topk_prefill,
    warmup,
    workspace_bytes,
    workspace_for,
)
from .cache import KernelCache  # noqa: E402
from .dispatcher import Dispatcher  # noqa: E402
from .warmup import WarmupEntry, WarmupReport  # noqa: E402
from .workspace import Workspace  # noqa: E402

# A library logs; the application decides where that goes.
logging.getLogger("gvr").addHandler(logging.NullHandler())

__all__ = [
    "topk_decode",
    "topk_prefill",
    "topk",
    "warmup",
    "workspace_for",
    "workspace_bytes",
    "set_cache_dir",
    "device_spec",
    "get_dispatcher",
    "Dispatcher",
    "KernelCache",
    "Workspace",
    "WarmupReport",
    "WarmupEntry",
]
