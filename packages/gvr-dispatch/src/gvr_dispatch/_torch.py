"""torch is the caller's: no GVR package declares it, so that pip never picks a build.

:func:`require_torch` turns a missing or too old torch into an ``ImportError`` that says
what to install, instead of a bare ``No module named 'torch'`` from deep inside a module.
"""

from __future__ import annotations

__all__ = ["MIN_TORCH", "INSTALL_HINT", "require_torch"]

#: Oldest torch release the packages support.
MIN_TORCH = (2, 4)

INSTALL_HINT = (
    "torch is not a declared dependency of the GVR packages, so that pip never chooses a "
    "build for you; install the one you need first, then the GVR packages. CPU only: "
    "`pip install torch --index-url https://download.pytorch.org/whl/cpu`; NVIDIA GPU: "
    "`pip install torch` (a CUDA build). Tested with torch 2.13.0."
)


def require_torch(package: str) -> None:
    """Import torch, or raise ``ImportError`` naming ``package`` and how to install torch.

    Raises:
        ImportError: torch is not installed, or older than :data:`MIN_TORCH`.
    """
    try:
        import torch
    except ImportError as e:
        raise ImportError(
            f"{package} needs torch >= 2.4, which is not installed. " + INSTALL_HINT
        ) from e
    parts = []
    for piece in torch.__version__.split("+")[0].split(".")[:2]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits) if digits else 0)
    if tuple(parts) < MIN_TORCH:
        raise ImportError(
            f"{package} needs torch >= 2.4, found torch {torch.__version__}. " + INSTALL_HINT
        )
