"""gvr-kernels."""
