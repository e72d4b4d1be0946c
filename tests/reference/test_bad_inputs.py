"""Bad input to every public function raises TypeError/ValueError naming the argument, and
caller-provided output buffers are left untouched."""

from __future__ import annotations

import numpy as np
import pytest
from gvr_reference import cpu_engine, oracle, validate, windows, workloads
from gvr_reference.windows import RowWindows

ROWS, WIDTH, K = 4, 10, 3


def _base():
    return {
        "logits": np.zeros((ROWS, WIDTH), np.float32),
        "kv_lens": np.array([5, 10], np.int32),
        "row_starts": np.array([0, 1, 2, 3], np.int32),
        "row_ends": np.array([5, 6, 10, 3], np.int32),
        "lengths": np.array([10, 0, 3, 4], np.int32),
        "k": K,
    }


# (name, override, exception, argument named in the message)
COMMON = [
    ("logits-list", {"logits": [[0.0] * WIDTH] * ROWS}, TypeError, "logits"),
    ("logits-f64", {"logits": np.zeros((ROWS, WIDTH))}, TypeError, "logits"),
    ("logits-f16", {"logits": np.zeros((ROWS, WIDTH), np.float16)}, TypeError, "logits"),
    ("logits-1d", {"logits": np.zeros(WIDTH, np.float32)}, ValueError, "logits"),
    ("logits-3d", {"logits": np.zeros((ROWS, WIDTH, 1), np.float32)}, ValueError, "logits"),
    ("k-zero", {"k": 0}, ValueError, "k"),
    ("k-negative", {"k": -4}, ValueError, "k"),
    ("k-float", {"k": 2.5}, TypeError, "k"),
    ("k-bool", {"k": True}, TypeError, "k"),
    ("k-none", {"k": None}, TypeError, "k"),
]
DECODE = [
    ("kv-f64", {"kv_lens": np.array([5.0, 10.0])}, TypeError, "kv_lens"),
    ("kv-i64", {"kv_lens": np.array([5, 10])}, TypeError, "kv_lens"),
    ("kv-list", {"kv_lens": [5, 10]}, TypeError, "kv_lens"),
    ("kv-2d", {"kv_lens": np.array([[5, 10]], np.int32)}, ValueError, "kv_lens"),
    ("kv-negative", {"kv_lens": np.array([5, -1], np.int32)}, ValueError, "kv_lens"),
    ("kv-rows", {"kv_lens": np.array([5, 10, 3], np.int32)}, ValueError, "kv_lens"),
    ("next_n-zero", {"next_n": 0}, ValueError, "next_n"),
    ("next_n-float", {"next_n": 2.0}, TypeError, "next_n"),
    ("cr-three", {"compress_ratio": 3}, ValueError, "compress_ratio"),
    ("cr-zero", {"compress_ratio": 0}, ValueError, "compress_ratio"),
    ("cr-negative", {"compress_ratio": -4}, ValueError, "compress_ratio"),
]
PREFILL = [
    ("starts-i64", {"row_starts": np.array([0, 1, 2, 3])}, TypeError, "row_starts"),
    ("ends-f32", {"row_ends": np.array([5, 6, 10, 3], np.float32)}, TypeError, "row_ends"),
    ("starts-short", {"row_starts": np.array([0, 1, 2], np.int32)}, ValueError, "row_starts"),
    (
        "both-short",
        {"row_starts": np.zeros(3, np.int32), "row_ends": np.ones(3, np.int32)},
        ValueError,
        "row_starts",
    ),
    (
        "starts-negative",
        {"row_starts": np.array([0, -1, 2, 3], np.int32)},
        ValueError,
        "row_starts",
    ),
    ("ends-past-width", {"row_ends": np.array([5, 6, 11, 3], np.int32)}, ValueError, "row_ends"),
    (
        "starts-after-ends",
        {"row_starts": np.array([0, 7, 2, 3], np.int32)},
        ValueError,
        "row_starts",
    ),
]
DENSE = [
    ("lengths-f64", {"lengths": np.array([1.0, 2, 3, 4])}, TypeError, "lengths"),
    ("lengths-negative", {"lengths": np.array([1, -2, 3, 4], np.int32)}, ValueError, "lengths"),
    ("lengths-rows", {"lengths": np.array([1, 2, 3], np.int32)}, ValueError, "lengths"),
]
OPTIONS = [
    ("sorted-int", {"sorted": 1}, TypeError, "sorted"),
    ("deterministic-str", {"deterministic": "yes"}, TypeError, "deterministic"),
]
BUFFERS = [
    ("out-i64", {"out": np.zeros((ROWS, K), np.int64)}, TypeError, "out"),
    ("out-shape", {"out": np.zeros((ROWS, K + 1), np.int32)}, ValueError, "out"),
    ("out-list", {"out": [[0] * K] * ROWS}, TypeError, "out"),
    ("values-f64", {"values": np.zeros((ROWS, K))}, TypeError, "values"),
    ("values-shape", {"values": np.zeros((ROWS - 1, K), np.float32)}, ValueError, "values"),
]


def _decode_call(fn, args):
    keys = ("next_n", "compress_ratio", "sorted", "deterministic", "out", "values")
    kw = {key: args[key] for key in keys if key in args}
    kw.setdefault("next_n", 2)
    return fn(args["logits"], args["kv_lens"], args["k"], **kw)


def _prefill_call(fn, args):
    kw = {key: args[key] for key in ("sorted", "deterministic", "out", "values") if key in args}
    return fn(args["logits"], args["row_starts"], args["row_ends"], args["k"], **kw)


def _dense_call(fn, args):
    kw = {key: args[key] for key in ("sorted", "deterministic", "out", "values") if key in args}
    return fn(args["logits"], args["k"], args["lengths"], **kw)


def _check_decode(args):
    return validate.check_decode(
        args["logits"],
        args["kv_lens"],
        args["k"],
        np.zeros((ROWS, 3), np.int32),
        next_n=args.get("next_n", 2),
        compress_ratio=args.get("compress_ratio", 1),
    )


def _check_prefill(args):
    z = np.zeros((ROWS, 3), np.int32)
    return validate.check_prefill(
        args["logits"], args["row_starts"], args["row_ends"], args["k"], z
    )


def _check_dense(args):
    return validate.check_dense(
        args["logits"], args["k"], np.zeros((ROWS, 3), np.int32), args["lengths"]
    )


CALLS = {
    "oracle.topk_decode": (lambda a: _decode_call(oracle.topk_decode, a), DECODE + OPTIONS),
    "engine.decode": (lambda a: _decode_call(cpu_engine.decode, a), DECODE + OPTIONS + BUFFERS),
    "check_decode": (_check_decode, DECODE),
    "oracle.topk_prefill": (lambda a: _prefill_call(oracle.topk_prefill, a), PREFILL + OPTIONS),
    "engine.prefill": (
        lambda a: _prefill_call(cpu_engine.prefill, a),
        PREFILL + OPTIONS + BUFFERS,
    ),
    "check_prefill": (_check_prefill, PREFILL),
    "oracle.topk_dense": (lambda a: _dense_call(oracle.topk_dense, a), DENSE + OPTIONS),
    "engine.dense": (lambda a: _dense_call(cpu_engine.dense, a), DENSE + OPTIONS + BUFFERS),
    "check_dense": (_check_dense, DENSE),
}
CASES = [
    pytest.param(call, override, exc, name, id=f"{call}-{case_id}")
    for call, (_, table) in CALLS.items()
    for case_id, override, exc, name in COMMON + table
]


@pytest.mark.parametrize("call, override, exc, name", CASES)
def test_bad_argument_raises_naming_it(call, override, exc, name):
    args = _base() | override
    with pytest.raises(exc, match=rf"\b{name}\b") as info:
        CALLS[call][0](args)
    assert "got" in str(info.value)


@pytest.mark.parametrize("call", list(CALLS))
def test_base_arguments_are_valid(call):
    CALLS[call][0](_base())


UNTOUCHED_CASES = {
    "k": {"k": 0},
    "kv_lens": {"kv_lens": np.array([5, -1], np.int32)},
    "row_ends": {"row_ends": np.array([5, 6, 11, 3], np.int32)},
    "lengths": {"lengths": np.array([1, -2, 3, 4], np.int32)},
    "sorted": {"sorted": "no"},
    "values": {"values": np.zeros((ROWS, K), np.float64)},
    "out": {"out": np.zeros((ROWS, K + 1), np.int32)},
}
SHAPE_ARGS = {
    "decode": ["k", "kv_lens", "sorted", "values", "out"],
    "prefill": ["k", "row_ends", "sorted", "values", "out"],
    "dense": ["k", "lengths", "sorted", "values", "out"],
}


@pytest.mark.parametrize(
    "shape, bad", [(shape, bad) for shape, names in SHAPE_ARGS.items() for bad in names]
)
def test_buffers_untouched_on_error(shape, bad):
    args = _base() | UNTOUCHED_CASES[bad]
    out = np.full((ROWS, K), 0x5A5A5A5A, np.int32)
    values = np.full((ROWS, K), 7.25, np.float32)
    args.setdefault("out", out)
    args.setdefault("values", values)
    call = {"decode": _decode_call, "prefill": _prefill_call, "dense": _dense_call}[shape]
    with pytest.raises((TypeError, ValueError)):
        call(getattr(cpu_engine, shape), args)
    assert (out == 0x5A5A5A5A).all() and (values == 7.25).all()
    # The same buffers are filled by a valid call.
    call(getattr(cpu_engine, shape), _base() | {"out": out, "values": values})
    assert (out != 0x5A5A5A5A).any()


def test_outputs_must_not_share_memory():
    """``out``, ``values`` and the logits are apart: the outputs are both written and the
    logits read meanwhile; overlapping ones are refused before anything is written."""
    logits = np.random.default_rng(0).standard_normal((ROWS, 4 * WIDTH)).astype(np.float32)
    before = logits.copy()
    out = np.zeros((ROWS, K), np.int32)
    with pytest.raises(ValueError, match="out and values must not share memory"):
        cpu_engine.dense(logits[:, :WIDTH], K, out=out, values=out.view(np.float32))
    over = logits.reshape(-1)[: ROWS * K].view(np.int32).reshape(ROWS, K)
    with pytest.raises(ValueError, match="out and logits must not share memory"):
        cpu_engine.dense(logits[:, :WIDTH], K, out=over)
    with pytest.raises(ValueError, match="values and logits must not share memory"):
        cpu_engine.dense(logits[:, :WIDTH], K, values=over.view(np.float32))
    assert np.array_equal(logits, before) and not out.any()


def test_read_only_out_buffer():
    out = np.zeros((ROWS, K), np.int32)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="out"):
        cpu_engine.dense(np.zeros((ROWS, WIDTH), np.float32), K, out=out)


@pytest.mark.parametrize("fn", [oracle.topk_windows, cpu_engine.topk_windows])
def test_windows_entry_points(fn):
    logits = np.zeros((2, 8), np.float32)
    with pytest.raises(TypeError, match="windows"):
        fn(logits, (np.zeros(2), np.ones(2)), 3)
    with pytest.raises(ValueError, match="windows"):
        fn(logits, RowWindows([0, 6], [8, 3]), 3)
    with pytest.raises(ValueError, match="windows"):
        fn(logits, RowWindows([0], [8]), 3)
    with pytest.raises(ValueError, match="windows"):
        fn(logits, RowWindows([0, -1], [1, 1]), 3)
    with pytest.raises(TypeError, match="windows"):
        validate.check_topk(logits, "rows", 3, np.zeros((2, 3), np.int32))


def test_row_windows_shapes():
    with pytest.raises(ValueError, match="RowWindows"):
        RowWindows(np.zeros(3), np.zeros(2))
    with pytest.raises(ValueError, match="RowWindows"):
        RowWindows(np.zeros((2, 2)), np.zeros((2, 2)))


def test_window_helpers():
    kv = np.array([4], np.int32)
    with pytest.raises(ValueError, match="next_n"):
        windows.decode_row_lengths(kv, 0, 1, 8)
    with pytest.raises(ValueError, match="compress_ratio"):
        windows.decode_row_lengths(kv, 1, 6, 8)
    with pytest.raises(ValueError, match="width"):
        windows.decode_row_lengths(kv, 1, 1, -1)
    with pytest.raises(TypeError, match="kv_lens"):
        windows.decode_row_lengths(kv.astype(np.int64), 1, 1, 8)
    with pytest.raises(ValueError, match="row_ends"):
        windows.prefill_windows(np.array([0], np.int32), np.array([9], np.int32), 8)
    with pytest.raises(TypeError, match="width"):
        windows.dense_windows(2, 8.0)


def test_workload_builders():
    with pytest.raises(ValueError, match="family"):
        workloads.make_dense_batch(0, rows=1, k=1, width=4, family="laplace")
    with pytest.raises(ValueError, match="lengths"):
        workloads.make_decode_batch(0, batch=1, k=1, width=4, lengths="short")
    with pytest.raises(ValueError, match="row_stride"):
        workloads.make_prefill_batch(0, rows=1, k=1, width=4, row_stride=3)
    with pytest.raises(ValueError, match="next_n"):
        workloads.make_decode_batch(0, batch=1, k=1, width=4, next_n=0)
    with pytest.raises(TypeError, match="rng"):
        workloads.make_dense_batch("seed", rows=1, k=1, width=4)
    with pytest.raises(ValueError, match="k"):
        workloads.make_logits(0, "gaussian", 1, 4, 0)
