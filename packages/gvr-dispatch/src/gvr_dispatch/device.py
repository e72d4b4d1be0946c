"""What the dispatcher asks of the CUDA runtime, behind one small object.

:class:`CudaRuntime` answers four questions: is the current stream capturing a CUDA graph,
which stream is current, which device a tensor lives on, and what the device is
(:class:`gvr_reference.routing.DeviceSpec`, read from the driver). The dispatcher reads the
spec once per device and caches it.

Keeping these behind an object lets the dispatcher's logic (launch keys, capture rules,
workspaces, layouts) run in tests on a machine without a GPU, with a stand-in runtime.
"""

from __future__ import annotations

from gvr_reference.routing import MAX_K, DeviceSpec, route_static

__all__ = ["CudaRuntime", "arch_of", "spec_from_properties", "max_workspace_words"]

#: Thread-block cluster size every sm_90 / sm_100 part supports (16 is non-portable).
PORTABLE_CLUSTER_SIZE = 8


def arch_of(major: int, minor: int) -> str:
    """The compile target of a compute capability: ``"sm_90a"`` for 9.0, ``"sm_10Xa"`` for 10.X.

    Raises:
        RuntimeError: the device is neither Hopper (9.0) nor Blackwell (10.x); the kernels
            use sm_90 instructions (run such tensors on the CPU instead).
    """
    if (major, minor) == (9, 0) or major == 10:
        return f"sm_{major}{minor}a"
    raise RuntimeError(
        f"GVR kernels need a Hopper (sm_90) or Blackwell (sm_10x) GPU, this device is "
        f"sm_{major}{minor}; move the tensors to the CPU to use the CPU engine"
    )


def spec_from_properties(props) -> DeviceSpec:
    """A :class:`DeviceSpec` from ``torch.cuda.get_device_properties(i)`` (or any object with
    the same attributes: ``name``, ``major``, ``minor``, ``multi_processor_count``,
    ``shared_memory_per_block_optin``, ``shared_memory_per_multiprocessor``,
    ``L2_cache_size``)."""
    return DeviceSpec(
        name=str(props.name),
        arch=arch_of(int(props.major), int(props.minor)),
        sm_count=int(props.multi_processor_count),
        smem_per_block=int(props.shared_memory_per_block_optin),
        smem_per_sm=int(props.shared_memory_per_multiprocessor),
        max_cluster_size=PORTABLE_CLUSTER_SIZE,
        l2_bytes=int(props.L2_cache_size),
    )


def max_workspace_words(spec: DeviceSpec) -> int:
    """uint32 words of split workspace the largest launch on ``spec`` can need.

    Split launches have at most ``sm_count // 2`` rows and their workspace grows with the rows
    (and, on parts with little shared memory, with K), so the largest is the route of that many
    rows at the longest envelope and the largest K.
    """
    rows = max(1, spec.sm_count // 2)
    longest = (1 << 26) - 1
    words = 0
    for k in (1, MAX_K):
        try:
            words = max(words, route_static(spec, rows=rows, n_env=longest, k=k).workspace_words)
        except ValueError:  # K that does not fit this part's shared memory
            continue
    return words


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

    def synchronize(self, device) -> None:
        """Wait for the device's work (used at the end of a warmup)."""
        self._torch.cuda.synchronize(device)

    def device_spec(self, device_index: int) -> DeviceSpec:
        """Read the device's properties from the driver."""
        return spec_from_properties(self._torch.cuda.get_device_properties(device_index))
