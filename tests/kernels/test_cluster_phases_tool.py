"""``tools/time_cluster_phases.py``: its stamped subclass of the cluster kernel still builds
against the kernel's methods (CPU compile for sm_90a, no GPU)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))


def test_the_stamped_cluster_kernel_compiles():
    import cutlass.cute as cute
    from gvr_kernels.abi import fake_kernel_args
    from gvr_kernels.compile import target_arch
    from time_cluster_phases import CASES, StampedClusterTopK

    _, _, cfg = CASES[0]
    with target_arch("sm_90a"):
        compiled = cute.compile(
            StampedClusterTopK(cfg), *fake_kernel_args(), options="--enable-tvm-ffi"
        )
    assert compiled is not None
