"""gvr-kernels: the CuTe DSL kernel families of GVR, their compile keys, routing and registry.

- :mod:`gvr_kernels.spec`: :class:`~gvr_kernels.spec.DeviceSpec` (what a GPU offers).
- :mod:`gvr_kernels.routing`: ``route_static`` / ``route_dynamic`` (which family,
  configuration and grid serve a launch).
- :mod:`gvr_kernels.registry`: the kernel families and what reads them.
- :mod:`gvr_kernels.abi`: the launch interface every compiled kernel shares.
- :mod:`gvr_kernels.compile`, :mod:`~gvr_kernels.aot`, :mod:`~gvr_kernels.audit`: compile,
  export/load, cubin resource audit.
- one package per family: :mod:`gvr_kernels.streaming`.

Importing this package (or the modules above other than the kernels themselves) does not
import the CuTe DSL.
"""
