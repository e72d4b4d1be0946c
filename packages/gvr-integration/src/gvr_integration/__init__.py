"""gvr-integration: GVR top-K inside inference engines.

- :mod:`.ops`: the ``torch.library`` custom ops ``gvr::topk_decode`` / ``gvr::topk_prefill``
  (registered on import, usable under ``torch.compile(fullgraph=True)`` and CUDA graphs) and
  the wrappers :func:`topk_decode` / :func:`topk_prefill` (direct eager calls, the ops when
  traced).
"""

from . import ops
from .ops import topk_decode, topk_prefill

__version__ = "0.1.0"

__all__ = ["ops", "topk_decode", "topk_prefill", "__version__"]
