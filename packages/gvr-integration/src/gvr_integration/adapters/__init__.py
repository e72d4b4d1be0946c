"""Engine adapters: the top-K call shapes of TensorRT-LLM, FlashInfer and vLLM, served by GVR.

- :mod:`.trtllm`: ``indexer_topk_decode``, ``indexer_topk_prefill``, the ``TopK`` module;
- :mod:`.flashinfer`: ``top_k_varlen``;
- :mod:`.vllm`: ``top_k_per_row_decode``, ``top_k_per_row_prefill``.

Each is a thin mapping onto :mod:`gvr_integration.ops` that keeps its peer's argument order,
units and buffer conventions (documented per module and in ``docs/integration.md``).
"""

from . import flashinfer, trtllm, vllm

__all__ = ["flashinfer", "trtllm", "vllm"]
