"""Tensor-free compilation of any registered kernel configuration.

Kernels compile from fake tensors whose dynamic extents are symbolic, with the TVM-FFI
environment stream (the caller's current torch stream, a capturing one included), so

- compiling needs no GPU (set ``CUTE_DSL_ARCH=sm_90a`` or ``sm_100a`` on a CPU machine),
- the compiled callable takes torch tensors and Python ints directly, with no per-call
  ``from_dlpack`` and no stream argument, in the order of ``gvr_kernels.abi.KernelArgs``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

__all__ = ["SUPPORTED_ARCHS", "compile_config", "target_arch"]

SUPPORTED_ARCHS = ("sm_90a", "sm_100a")


@contextlib.contextmanager
def target_arch(arch: str | None) -> Iterator[None]:
    """Compile for ``arch`` (e.g. ``"sm_90a"``) inside the block; ``None`` keeps the current
    target (the visible GPU, or ``CUTE_DSL_ARCH``)."""
    if arch is None:
        yield
        return
    if arch not in SUPPORTED_ARCHS:
        raise ValueError(f"arch must be one of {SUPPORTED_ARCHS}, got {arch!r}")
    old = os.environ.get("CUTE_DSL_ARCH")
    os.environ["CUTE_DSL_ARCH"] = arch
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("CUTE_DSL_ARCH", None)
        else:
            os.environ["CUTE_DSL_ARCH"] = old


def compile_config(config, arch: str | None = None):
    """Compile one configuration of any registered family.

    Args:
        config: the compile key (e.g. a ``StreamingConfig``).
        arch: ``"sm_90a"`` / ``"sm_100a"`` to cross-compile (no GPU needed), or ``None`` for
            the current target.

    Returns:
        The compiled TVM-FFI callable (``cute.compile`` result); it also supports
        ``export_to_c`` for ahead-of-time use.

    Raises:
        TypeError: ``config`` belongs to no registered family.
    """
    import cutlass.cute as cute

    from .registry import family_of

    fam = family_of(config)
    options = "--enable-tvm-ffi"
    if arch is not None:
        # The DSL reads CUTE_DSL_ARCH once, when it is first imported; the compile option
        # is what selects the target of this one compilation.
        options += f" --gpu-arch {arch}"
    with target_arch(arch):
        kernel = fam.kernel_class()(config)
        return cute.compile(kernel, *fam.fake_args(config), options=options)
