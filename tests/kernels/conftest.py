"""Fixtures of the kernel device suites."""

from __future__ import annotations

import pytest
from kernel_helpers import SEED


@pytest.fixture(scope="module")
def kp():
    """A :class:`gvr_kernels.testing.KernelProvider` per test module (kernels from
    ``$GVR_AOT_DIR`` or compiled on the spot); skips without a CUDA device."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from gvr_kernels.testing import KernelProvider

    print(f"\nseed {SEED}")
    return KernelProvider()
