"""gvr-reference: the exact top-K oracle, the validator, the numba CPU engine and the workload
generators of GVR (numpy + numba; no torch, no CUDA).

Submodules: :mod:`~gvr_reference.keys` (the order key, of float32 and of the 16-bit formats),
:mod:`~gvr_reference.windows`, :mod:`~gvr_reference.oracle`, :mod:`~gvr_reference.validate`,
:mod:`~gvr_reference.cpu_engine`, :mod:`~gvr_reference.workloads`,
:mod:`~gvr_reference.blockskip` (the block-skip producer, contract check and CPU model).
"""

from . import cpu_engine, oracle, validate, windows, workloads
from .keys import (
    KEY_FORMATS,
    KEY_NAN,
    KEY_NEG_INF,
    KEY_POS_INF,
    KEY_POS_ZERO,
    KeyFormat,
    format_keys,
    key_format,
    key_to_float,
    order_key,
    round_to_format,
)
from .oracle import PAD_INDEX, PAD_VALUE, topk_decode, topk_dense, topk_prefill, topk_windows
from .validate import (
    FAILURE_CODES,
    ValidationReport,
    assert_decode,
    assert_dense,
    assert_prefill,
    assert_topk,
    check_decode,
    check_dense,
    check_prefill,
    check_topk,
)
from .windows import (
    RowWindows,
    decode_row_lengths,
    decode_windows,
    dense_windows,
    prefill_row_windows,
    prefill_windows,
)
from .workloads import (
    FAMILIES,
    POISON,
    DecodeBatch,
    DenseBatch,
    PrefillBatch,
    make_decode_batch,
    make_dense_batch,
    make_logits,
    make_prefill_batch,
)

__all__ = [
    # keys
    "order_key",
    "key_to_float",
    "KEY_NAN",
    "KEY_POS_ZERO",
    "KEY_NEG_INF",
    "KEY_POS_INF",
    "KeyFormat",
    "KEY_FORMATS",
    "key_format",
    "format_keys",
    "round_to_format",
    # modules
    "cpu_engine",
    "oracle",
    "validate",
    "windows",
    "workloads",
    # oracle
    "topk_decode",
    "topk_prefill",
    "topk_dense",
    "topk_windows",
    "PAD_INDEX",
    "PAD_VALUE",
    # validator
    "FAILURE_CODES",
    "ValidationReport",
    "check_topk",
    "check_decode",
    "check_prefill",
    "check_dense",
    "assert_topk",
    "assert_decode",
    "assert_prefill",
    "assert_dense",
    # windows
    "RowWindows",
    "decode_row_lengths",
    "decode_windows",
    "prefill_windows",
    "prefill_row_windows",
    "dense_windows",
    # workloads
    "FAMILIES",
    "POISON",
    "DecodeBatch",
    "PrefillBatch",
    "DenseBatch",
    "make_decode_batch",
    "make_prefill_batch",
    "make_dense_batch",
    "make_logits",
]
