"""gvr-integration: GVR top-K inside inference engines.

- :mod:`.ops`: the ``torch.library`` custom ops ``gvr::topk_decode`` / ``gvr::topk_prefill``
  (registered on import, usable under ``torch.compile(fullgraph=True)`` and CUDA graphs) and
  the wrappers :func:`topk_decode` / :func:`topk_prefill` (direct eager calls, the ops when
  traced).
- :mod:`.adapters`: the call shapes of TensorRT-LLM, FlashInfer and vLLM.
- :mod:`.pipeline`: the DSA decode pipeline (lightning indexer -> GVR top-K -> sparse
  attention) on the real sample; :mod:`.graph`: a decode top-K captured in a CUDA graph.
- ``python -m gvr_integration.demo``: the pipeline on every stored position, checked against
  the oracle.

See ``docs/integration.md``.
"""

import gvr_dispatch  # noqa: F401  (first: it explains a missing torch)

from . import adapters, ops
from .ops import topk_decode, topk_prefill

__version__ = "0.1.0"

__all__ = ["ops", "adapters", "topk_decode", "topk_prefill", "__version__"]
