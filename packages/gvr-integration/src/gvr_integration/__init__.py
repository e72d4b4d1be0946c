"""gvr-integration: GVR top-K inside inference engines.

- :mod:`.ops`: the ``torch.library`` custom ops ``gvr::topk_decode`` / ``gvr::topk_prefill``
  (registered on import, usable under ``torch.compile(fullgraph=True)`` and CUDA graphs) and
  the wrappers :func:`topk_decode` / :func:`topk_prefill` (direct eager calls, the ops when
  traced).
- :mod:`.adapters`: the call shapes of TensorRT-LLM, FlashInfer and vLLM.
"""

from . import adapters, ops
from .ops import topk_decode, topk_prefill

__version__ = "0.1.0"

__all__ = ["ops", "adapters", "topk_decode", "topk_prefill", "__version__"]
