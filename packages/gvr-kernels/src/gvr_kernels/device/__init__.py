"""Shared device pieces of the GVR kernel families (CuTe DSL ``@cute.jit`` functions)."""
