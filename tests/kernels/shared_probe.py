"""Probe for ``test_compile``: compile a kernel that runs a family's shared-memory allocation
and stores the allocator's total (a compile-time constant, times 7919) to global memory, then
read that constant back from the kept PTX. For a layout whose bracket histogram the 32
scratch words of ``wsum`` must precede (``device.bracket.count_bracket``), a second store
gives the byte distance from ``wsum`` to that histogram (times 7919). Run as a script (the
DSL needs a source file):

    CUTE_DSL_ARCH=sm_90a CUTE_DSL_KEEP=ptx python shared_probe.py '[[family, {fields}], ...]'

prints ``{config name: [stored constants]}`` as JSON. Each family's kernel module provides
``allocate_shared(cfg)``.
"""

from __future__ import annotations

import glob
import importlib
import json
import os
import re
import sys

import cutlass.cute as cute
from cutlass import Int32, const_expr
from gvr_kernels.device.shared import shared_usage
from gvr_kernels.registry import FAMILIES, config_from_dict

MARK = 7919


def bracket_hist(cfg):
    """The histogram that ``wsum`` must directly precede in ``cfg``'s layout, or None."""
    if cfg.family == "register":
        return "hist"
    if cfg.family == "cluster" and cfg.bracket:
        return "bhist"
    return None


_STORE = re.compile(r"st\.global\.b32\s+\[[^\]]+\],\s*(\d+);")


class Probe:
    def __init__(self, cfg, allocate_shared):
        self.cfg = cfg
        self.allocate_shared = allocate_shared

    @cute.jit
    def __call__(self, x: cute.Tensor, stream):
        self.kernel(x).launch(
            grid=[1, 1, 1], block=[32, 1, 1], smem=self.cfg.smem_bytes, stream=stream
        )

    @cute.kernel
    def kernel(self, x: cute.Tensor):
        arrays, allocator = self.allocate_shared(self.cfg)
        x[0] = shared_usage(allocator) * Int32(MARK)
        hist = bracket_hist(self.cfg)
        if const_expr(hist is not None):
            at = getattr(arrays, hist).iterator.toint()
            x[1] = (at - arrays.wsum.iterator.toint()) * Int32(MARK)


def main() -> None:
    found = {}
    for family, fields in json.loads(sys.argv[1]):
        cfg = config_from_dict(family, fields)
        allocate = importlib.import_module(FAMILIES[family].kernel_module).allocate_shared
        for f in glob.glob("*.ptx"):
            os.remove(f)
        x = cute.runtime.make_fake_compact_tensor(Int32, (cute.sym_int(),))
        stream = cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)
        cute.compile(Probe(cfg, allocate), x, stream, options="--enable-tvm-ffi")
        (ptx,) = glob.glob("*.ptx")
        found[cfg.name] = [int(v) for v in _STORE.findall(open(ptx).read())]
    print(json.dumps(found))


if __name__ == "__main__":
    main()
