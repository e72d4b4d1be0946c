"""The split-row workspace: zeroed global memory where the CTAs of a split row meet.

A split launch (several CTAs per row, few long rows) stages each row's survivors in a slab of
a uint32 workspace and counts them and the arriving CTAs in the slab's header words; each slab
entry carries a valid bit. The last CTA of a row gathers the slab, clearing each entry's valid
bit as it reads it, selects, and restores the header words to zero. So a workspace only has to
be zeroed once, when allocated, and stays usable between launches, eager or replayed from a
CUDA graph.

Two launches that may run at the same time must not share a workspace. The dispatcher keeps one
per (device, stream) for eager calls and one per device for launches captured into CUDA graphs
(graphs replay on whatever stream the caller picks). Callers that replay several graphs
concurrently, or want full control, pass their own (``workspace=``).
"""

from __future__ import annotations

import torch

__all__ = ["Workspace", "as_workspace_words"]

_ACCEPTED = (torch.uint8, torch.int32, torch.uint32)


class Workspace:
    """A uint32 CUDA buffer for split launches, zeroed when allocated.

    Attributes:
        tensor: uint32 ``[words]``, contiguous, 16-byte aligned; its per-row header words are
            zero between launches.
    """

    __slots__ = ("tensor",)

    def __init__(self, tensor: torch.Tensor):
        self.tensor = as_workspace_words(tensor, "workspace", tensor.device, 0)

    @classmethod
    def zeros(cls, words: int, device) -> Workspace:
        """Allocate a zeroed workspace of ``words`` uint32 words (at least 4) on ``device``."""
        t = torch.zeros(max(int(words), 4), dtype=torch.int32, device=device)
        return cls(t.view(torch.uint32))

    @property
    def words(self) -> int:
        """Size in uint32 words."""
        return self.tensor.shape[0]

    @property
    def nbytes(self) -> int:
        """Size in bytes."""
        return 4 * self.tensor.shape[0]

    @property
    def device(self) -> torch.device:
        """Where the workspace lives."""
        return self.tensor.device

    def __repr__(self) -> str:
        return f"Workspace({self.nbytes} bytes on {self.device})"


def as_workspace_words(ws: object, name: str, device: torch.device, words: int) -> torch.Tensor:
    """Check a caller-provided workspace and view it as uint32 words.

    Args:
        ws: a :class:`Workspace`, or a tensor of dtype uint8, int32 or uint32.
        name: the argument name for error messages.
        device: the device of the call.
        words: uint32 words the launch needs.

    Returns:
        A 1-D uint32 view of the same memory.

    Raises:
        TypeError: not a Workspace or tensor, or an unsupported dtype.
        ValueError: wrong device, not contiguous, not 16-byte aligned, or too small.

    The buffer must be zeroed before its first use (the kernels keep the words that matter
    zero); that is not checked, since checking would read device memory.
    """
    if isinstance(ws, Workspace):
        t = ws.tensor
    elif isinstance(ws, torch.Tensor):
        t = ws
    else:
        raise TypeError(f"{name} must be a Workspace or a torch.Tensor, got {type(ws).__name__}")
    if t.dtype not in _ACCEPTED:
        raise TypeError(f"{name} must be a uint8, int32 or uint32 tensor, got {t.dtype}")
    if t.device != device:
        raise ValueError(f"{name} must be on the logits device {device}, got {t.device}")
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous, got strides {t.stride()}")
    if t.data_ptr() & 15:
        raise ValueError(f"{name} must be 16-byte aligned, got address {t.data_ptr():#x}")
    nbytes = t.numel() * t.element_size()
    if nbytes < 4 * words:
        raise ValueError(f"{name} is too small: this launch needs {4 * words} bytes, got {nbytes}")
    if t.dtype is torch.uint32 and t.dim() == 1:
        return t
    flat = t.reshape(-1)
    if flat.dtype is torch.uint8:
        flat = flat[: nbytes - nbytes % 4]
    return flat.view(torch.uint32)
