"""The order key: a monotone map from fp32 scores to uint32.

Every GVR path (oracle, CPU engine, CPU model, kernels) decides membership by comparing these
keys as unsigned integers, never by float comparison. The map is

    key(x) = bits(x) ^ (0x80000000 | -(bits(x) >> 31))      (flip the sign bit of x >= +0,
                                                              flip every bit of x <= -0)

made canonical in two places so that the integer order is exactly the order ``torch.topk``
uses for ``largest=True``:

- every NaN (either sign, any payload) maps to ``0xFFFFFFFF``, above ``key(+inf) = 0xFF800000``:
  torch ranks NaN above +inf;
- ``-0.0`` maps to ``key(+0.0) = 0x80000000``: the two zeros compare equal in torch, so they
  form one tie class here too.

Denormals keep their own keys (no flush to zero). The map is injective on everything else,
so ``key(a) == key(b)`` iff ``a`` and ``b`` are equal as torch compares them (NaN == NaN).
"""

from __future__ import annotations

import numpy as np

KEY_NAN = np.uint32(0xFFFFFFFF)
KEY_POS_ZERO = np.uint32(0x80000000)
KEY_NEG_INF = np.uint32(0x007FFFFF)
KEY_POS_INF = np.uint32(0xFF800000)

__all__ = ["order_key", "key_to_float", "KEY_NAN", "KEY_POS_ZERO", "KEY_NEG_INF", "KEY_POS_INF"]


def order_key(x: np.ndarray) -> np.ndarray:
    """Map fp32 scores to their uint32 order keys.

    Args:
        x: array of dtype float32, any shape.

    Returns:
        uint32 array of the same shape; ``order_key(a) < order_key(b)`` iff ``a`` ranks below
        ``b`` in ``torch.topk(largest=True)`` order (NaN highest, -0.0 == +0.0).

    Raises:
        TypeError: ``x`` is not a float32 array.
    """
    if not isinstance(x, np.ndarray) or x.dtype != np.float32:
        raise TypeError(
            f"x must be a float32 numpy array, got {type(x).__name__} "
            f"of dtype {getattr(x, 'dtype', None)}"
        )
    u = x.view(np.uint32)
    mask = np.where(u >> np.uint32(31), np.uint32(0xFFFFFFFF), np.uint32(0x80000000))
    k = u ^ mask
    k = np.where(np.isnan(x), KEY_NAN, k)
    k = np.where(u == np.uint32(0x80000000), KEY_POS_ZERO, k)
    return k.astype(np.uint32, copy=False)


def key_to_float(k: np.ndarray) -> np.ndarray:
    """Inverse of :func:`order_key` on canonical keys (NaN comes back as a positive quiet NaN
    with an all-ones payload, -0.0 as +0.0).

    Args:
        k: uint32 array of keys.

    Returns:
        float32 array of the same shape.
    """
    k = np.asarray(k, dtype=np.uint32)
    u = np.where(k >> np.uint32(31), k ^ np.uint32(0x80000000), ~k)
    return u.astype(np.uint32).view(np.float32)
