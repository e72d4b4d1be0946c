"""Shared pieces of the kernel device suites: the seed, the value families, device copies of
the reference batches, and the oracle check that counts the rows it verified."""

from __future__ import annotations

import os
import time

import numpy as np
from gvr_reference import validate
from gvr_reference.oracle import topk_windows

#: Fresh random rows every run; replay a failure with ``GVR_TEST_SEED``.
SEED = int(os.environ.get("GVR_TEST_SEED", time.time_ns() % (1 << 31)))
#: Every value family of ``gvr_reference.workloads`` the suites draw rows from.
FAMILIES = (
    "gaussian",
    "dsa_like",
    "tie_flood",
    "two_valued",
    "constant",
    "hidden_peaks",
    "position_skew",
    "pos_inf",
    "neg_inf",
    "denormals",
    "signed_zero",
    "nan",
    "quantized",
    "near_flt_max",
)


def rng(*salt):
    return np.random.default_rng([SEED, *salt])


def to_device(batch):
    """The batch's arena on the device and the logits view with the same strides."""
    import torch

    arena = torch.from_numpy(np.ascontiguousarray(batch.arena)).cuda()
    return arena, arena[:, : batch.width]


def device_scores(a, dtype="float32"):
    """A float32 numpy array of scores that are values of ``dtype`` (their exact widening) on
    the device in that dtype, bit for bit (converted through numpy, which keeps a NaN's sign
    and payload where torch's conversion does not)."""
    import torch

    a = np.ascontiguousarray(a, dtype=np.float32)
    if dtype == "float32":
        return torch.from_numpy(a).cuda()
    if dtype == "bfloat16":
        bits = (a.view(np.uint32) >> np.uint32(16)).astype(np.uint16)
        return torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16).cuda()
    return torch.from_numpy(a.astype(np.float16)).cuda()


def widened(values):
    """Device values of any dtype as the float32 numpy widening the oracle compares with, bit
    for bit (numpy keeps a float16 NaN's payload)."""
    import torch

    v = values.cpu()
    if v.dtype == torch.bfloat16:
        bits = v.view(torch.int16).numpy().view(np.uint16).astype(np.uint32) << np.uint32(16)
        return torch.from_numpy(bits.view(np.float32))
    return torch.from_numpy(v.numpy().astype(np.float32))


def padded_stride(width):
    return -(-width // 4) * 4


def check(counter, batch, out, values=None, det=False):
    """Validate a result against the oracle (and, with ``det``, the smallest-index tie
    choice); add the batch's rows to ``counter["n"]``."""
    o = out.cpu().numpy()
    v = None if values is None else values.cpu().numpy()
    report = validate.check_topk(
        batch.logits, batch.windows, batch.k, o, v, getattr(batch, "dtype", "float32")
    )
    assert report.ok, report.summary()
    if det:
        want = topk_windows(batch.logits, batch.windows, batch.k, deterministic=True)
        assert np.array_equal(np.sort(want, axis=1), np.sort(o, axis=1)), "tie choice"
    counter["n"] += batch.rows


def lane_positions(lane: int, threads: int, vecs: int, vec: int) -> np.ndarray:
    """Window positions a register row puts in the vector slots of thread ``lane`` of the
    first CTA (vector ``j`` of thread ``t`` holds positions ``(t + j * threads) * vec`` on:
    ``gvr_kernels.device.layout.RegisterRow``)."""
    j = np.arange(vecs)[:, None]
    return ((lane + j * threads) * vec + np.arange(vec)[None, :]).ravel()


def plant_lane_crowds(x: np.ndarray, rows, threads: int, vecs: int, k: int, dtype: str):
    """``x`` with rows where one thread holds many of the keys an emission writes (bit-walk
    tests; the warp then keeps the predicated form), rounded to ``dtype``: in row
    ``rows[0]`` every slot of thread 0 above the rest (distinct), in row ``rows[1]`` every
    slot of thread 1 one tie value below ``k - 8`` distinct keys elsewhere, so the crossing
    bin is those ties, 8 of them wanted."""
    from gvr_reference.keys import key_format, round_to_format

    vec = key_format(dtype).vec
    r0, r1 = rows
    own = lane_positions(0, threads, vecs, vec)
    x[r0, own] = 100.0 + np.arange(own.size, dtype=np.float32)
    ties = lane_positions(1, threads, vecs, vec)
    x[r1, ties] = 7.0
    others = np.setdiff1d(np.arange(2 * threads * vec, 2 * threads * vec + 4 * k), ties)
    x[r1, others[: k - 8]] = 50.0 + np.arange(k - 8, dtype=np.float32) / 8
    return round_to_format(x, key_format(dtype))
