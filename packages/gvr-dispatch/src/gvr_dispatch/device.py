"""What the dispatcher asks of the CUDA runtime, behind one small object.

:class:`CudaRuntime` answers four questions: is the current stream capturing a CUDA graph,
which stream is current, which device a tensor lives on, and what the device is
(:class:`gvr_kernels.spec.DeviceSpec`, read from the driver). The dispatcher reads the
spec once per device and caches it.

Keeping these behind an object lets the dispatcher's logic (launch keys, capture rules,
workspaces, layouts) run in tests on a machine without a GPU, with a stand-in runtime.
"""

from __future__ import annotations

from gvr_kernels.routing import max_workspace_words
from gvr_kernels.spec import DeviceSpec, arch_of, spec_from_properties

__all__ = ["CudaRuntime", "arch_of", "spec_from_properties", "max_workspace_words"]


class CudaRuntime:
    """The CUDA side of the dispatcher (torch's CUDA runtime).

    Attributes:
        kernel_device_type: tensors on this device type run the kernels (``"cuda"``).
    """

    kernel_device_type = "cuda"

    def __init__(self) -> None:
        import torch

        self._torch = torch
        c = torch._C
        # The raw entry points cost a fraction of the public wrappers on the hot path.
        self._capturing = getattr(
            c, "_cuda_isCurrentStreamCapturing", torch.cuda.is_current_stream_capturing
        )
        self._raw_stream = getattr(c, "_cuda_getCurrentRawStream", None)
        self._get_device = getattr(c, "_cuda_getDevice", None)

    def capturing(self) -> bool:
        """Whether the current stream is capturing a CUDA graph."""
        try:
            return bool(self._capturing())
        except RuntimeError:  # CUDA not initialised yet: nothing can be capturing
            return False

    def stream_key(self, device_index: int) -> int:
        """The current stream of ``device_index`` as an integer (its ``cudaStream_t``)."""
        if self._raw_stream is not None:
            return int(self._raw_stream(device_index))
        return int(self._torch.cuda.current_stream(device_index).cuda_stream)

    def stream_key_of(self, stream) -> int:
        """The integer identity of a ``torch.cuda.Stream``."""
        return int(stream.cuda_stream)

    @staticmethod
    def index(device) -> int:
        """Device index of a CUDA ``torch.device``."""
        return device.index

    def device_count(self) -> int:
        """Number of visible CUDA devices."""
        return int(self._torch.cuda.device_count())

    def current_index(self) -> int:
        """Index of the current CUDA device."""
        if self._get_device is not None:
            return int(self._get_device())
        return int(self._torch.cuda.current_device())

    def device_guard(self, device_index: int):
        """A context manager that makes ``device_index`` the current device (kernels load and
        launch in the current device's context)."""
        return self._torch.cuda.device(device_index)

    def current_device(self):
        """The current CUDA device (raises ``RuntimeError`` when CUDA is unavailable)."""
        torch = self._torch
        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA device is available")
        return torch.device("cuda", torch.cuda.current_device())

    @staticmethod
    def kernel_arg(tensor):
        """``tensor`` as the compiled kernels take it: a TVM-FFI tensor view (same memory,
        keeps ``tensor`` alive), so a tensor passed on every call is converted only once."""
        import tvm_ffi

        return tvm_ffi.from_dlpack(tensor)

    def synchronize(self, device) -> None:
        """Wait for the device's work (used at the end of a warmup)."""
        self._torch.cuda.synchronize(device)

    def device_spec(self, device_index: int) -> DeviceSpec:
        """Read the device's properties from the driver."""
        return spec_from_properties(self._torch.cuda.get_device_properties(device_index))
