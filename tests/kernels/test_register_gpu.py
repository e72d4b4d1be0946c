"""Device tests of the register-resident family (``pytest -m gpu`` on an H200).

Every result is checked by the CPU validator of ``gvr_reference`` on fresh random rows (seed
printed; replay with ``GVR_TEST_SEED``), with ``+3e38`` poison beyond every valid length, for
each configuration of :data:`CONFIGS` forced directly (not through the router), and the path
every row took is compared with the CPU model (``gvr_reference.register_model``). The 16-bit
configurations (bfloat16, float16: eight scores a vector) take the forced paths and the
bracket tests here; ``test_half_gpu.py`` runs them on every value family through the router.
"""

from __future__ import annotations

from dataclasses import replace

import kernel_helpers as helpers
import numpy as np
import pytest
from gvr_reference import validate
from gvr_reference.model import Path
from gvr_reference.oracle import topk_windows
from gvr_reference.register_model import sample_positions, simulate_row
from gvr_reference.windows import RowWindows
from gvr_reference.workloads import make_decode_batch, make_dense_batch, make_prefill_batch
from kernel_helpers import FAMILIES, SEED, rng

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

ROWS_CHECKED = {"n": 0}
#: (threads, vecs): every shape the router uses and the extremes of the family.
SHAPES = [(256, 1), (512, 2), (512, 4), (1024, 4), (512, 8), (1024, 8), (256, 2), (256, 4),
          (256, 8)]  # fmt: skip
#: The bulk shapes' residency and staging (``gvr_kernels.routing``: four 256-thread CTAs per
#: SM past two 512-thread CTAs per SM); the other shapes take the configuration's defaults.
BULK = {
    (256, 2): dict(resident=4, capacity=2048),
    (256, 4): dict(resident=4, capacity=2048),
    (256, 8): dict(resident=4, capacity=4096),
}
#: The 16-bit formats and the float32 shapes with half the vectors (the router builds the
#: first, 512 x 1, for 16-bit envelopes up to 4,096; the others are the family's extremes).
DTYPES16 = ("bfloat16", "float16")
SHAPES16 = [(512, 1), (512, 2), (1024, 2), (1024, 4)]
#: A random-stream salt per logits format.
SALT = {"float32": 0, "bfloat16": 1, "float16": 2}
#: (shape, dtype, bracket) of the forced-path test: 16-bit shapes with and without the
#: bracket path.
FORCED = [
    ((512, 4), "float32", True),
    ((1024, 8), "float32", True),
    ((256, 4), "float32", True),
    ((256, 8), "float32", False),
] + [
    (s, d, b)
    for d in DTYPES16
    for s, b in (((512, 2), True), ((1024, 4), True), ((1024, 2), False))
]
#: The forced-path cases that may load early (``RegisterConfig.early_loads``).
FORCED_EARLY = [
    ((512, 4), "float32", True),
    ((512, 8), "float32", False),
    ((512, 2), "bfloat16", True),
]
#: (shape, dtype) of the bracket tests.
BRACKET_CASES = [(s, "float32") for s in SHAPES] + [(s, d) for d in DTYPES16 for s in SHAPES16]


def config(threads, vecs, **kw):
    from gvr_kernels.register import RegisterConfig

    return RegisterConfig(threads=threads, vecs=vecs, **{**BULK.get((threads, vecs), {}), **kw})


def launch(kp, cfg, mode, logits, a, b, k, **kw):
    """Run ``cfg`` (its call-mode fields replaced by the arguments, as the provider does)."""
    from gvr_kernels.routing import Route

    rows = logits.shape[0]
    route = Route(config=cfg, parts=1, grid=rows, workspace_words=0, n_env=logits.shape[1])
    return kp.launch(mode, logits, a, b, k, route=route, **kw)


def to_device(batch):
    return helpers.to_device(batch)[1]


def stride_of(width):
    return helpers.padded_stride(width)


def check(batch, out, values=None, det=False):
    helpers.check(ROWS_CHECKED, batch, out, values, det)


def family_batch(g, i, family, rows, k, width, pad=4, **kw):
    """A decode batch of ``rows`` rows of value family ``family`` (the ``i``-th of
    :data:`FAMILIES`: ragged lengths for odd ``i``, edge lengths for even) in a ``width``
    arena whose row stride is ``pad`` scores past the padded width."""
    return make_decode_batch(
        g,
        batch=rows,
        k=k,
        width=width,
        row_stride=stride_of(width) + pad,
        family=family,
        lengths="ragged" if i % 2 else "edge",
        **kw,
    )


@pytest.mark.parametrize("bracket", [True, False], ids=["bracket", "sampled"])
@pytest.mark.parametrize("shape", SHAPES, ids=[f"t{t}v{v}" for t, v in SHAPES])
@pytest.mark.parametrize("k", [512, 1024, 2048])
def test_families_exact(kp, shape, k, bracket):
    """Every value family at lengths from 0 to past the registers (the oversize rows take
    the whole-row selection from memory), one launch per family, with and without the
    bracket path."""
    cap = 4 * shape[0] * shape[1]
    width = cap + 37
    for i, family in enumerate(FAMILIES):
        batch = family_batch(rng(1, k, *shape, i), i, family, 32, k, width)
        logits = to_device(batch)
        kv = torch.from_numpy(batch.kv_lens).cuda()
        cfg = config(*shape, bracket=bracket)
        out, _, _, _ = launch(kp, cfg, "decode", logits, kv, None, k)
        check(batch, out)


@pytest.mark.parametrize("shape", SHAPES, ids=[f"t{t}v{v}" for t, v in SHAPES])
def test_mtp_and_compression(kp, shape):
    cap = 4 * shape[0] * shape[1]
    for k, nn, cr in ((512, 2, 1), (1024, 3, 4), (2048, 4, 4), (7, 2, 1)):
        width = cap if cr == 1 else cap - 5
        batch = make_decode_batch(
            rng(2, k, nn, cr, *shape),
            batch=32,
            next_n=nn,
            compress_ratio=cr,
            k=k,
            width=width,
            row_stride=stride_of(width),
            family="dsa_like",
            lengths="edge",
        )
        logits = to_device(batch)
        kv = torch.from_numpy(batch.kv_lens).cuda()
        out, _, _, _ = launch(kp, config(*shape), "decode", logits, kv, None, k, next_n=nn, cr=cr)
        check(batch, out)


#: The shapes that may load early (``RegisterConfig.early_loads``: 128 registers a thread).
EARLY = [(256, 1), (512, 2), (512, 4), (512, 8)]


@pytest.mark.parametrize("shape", EARLY, ids=[f"t{t}v{v}" for t, v in EARLY])
@pytest.mark.parametrize("k", [512, 2048])
def test_early_loads_exact(kp, shape, k):
    """Loads issued before the length (``early_loads``): every value family at lengths from 0
    to past the registers, in logits wider than the CTA's capacity (the loads stop at it),
    narrower (they stop at the width; the padding past it holds poison) and with next_n and
    compress_ratio; with and without the bracket path."""
    cap = 4 * shape[0] * shape[1]
    cases = [(cap + 37, 1, 1), (cap // 2 + 5, 1, 1), (cap - 3, 3, 4)]
    for c, (width, nn, cr) in enumerate(cases):
        for i, family in enumerate(FAMILIES):
            batch = family_batch(
                rng(10, k, *shape, c, i), i, family, 24, k, width, pad=8, next_n=nn,
                compress_ratio=cr,
            )  # fmt: skip
            logits = to_device(batch)
            kv = torch.from_numpy(batch.kv_lens).cuda()
            cfg = config(*shape, bracket=bool(i % 3), early_loads=True)
            out, _, _, _ = launch(kp, cfg, "decode", logits, kv, None, k, next_n=nn, cr=cr)
            check(batch, out)


@pytest.mark.parametrize("det", [False, True])
@pytest.mark.parametrize("shape", [(512, 2), (1024, 4), (1024, 8), (256, 4)], ids=str)
def test_values_and_tie_modes(kp, shape, det):
    cap = 4 * shape[0] * shape[1]
    for k, family in ((512, "quantized"), (2048, "two_valued"), (1024, "signed_zero")):
        for fam in (family, "nan", "constant"):
            batch = make_decode_batch(
                rng(3, k, det, *shape, FAMILIES.index(fam)),
                batch=40,
                k=k,
                width=cap,
                row_stride=cap,
                family=fam,
                lengths="ragged",
            )
            logits = to_device(batch)
            kv = torch.from_numpy(batch.kv_lens).cuda()
            cfg = config(*shape)
            out, val, _, _ = launch(kp, cfg, "decode", logits, kv, None, k, values=True, det=det)
            check(batch, out, val, det=det)


@pytest.mark.parametrize("shape", [(512, 2), (1024, 4), (1024, 8)], ids=str)
def test_prefill_windows_and_full_rows(kp, shape):
    cap = 4 * shape[0] * shape[1]
    for k in (512, 2048):
        batch = make_prefill_batch(
            rng(4, k, *shape),
            rows=300,
            k=k,
            width=cap + 9,
            row_stride=stride_of(cap + 9),
            family="gaussian",
            misaligned=True,
        )
        logits = to_device(batch)
        s = torch.from_numpy(batch.row_starts).cuda()
        e = torch.from_numpy(batch.row_ends).cuda()
        out, val, _, _ = launch(kp, config(*shape), "prefill", logits, s, e, k, values=True)
        check(batch, out, val)
        dense = make_dense_batch(
            rng(5, k, *shape), rows=64, k=k, width=cap - 1, row_stride=cap, family="dsa_like"
        )
        logits = to_device(dense)
        out, _, _, _ = launch(kp, config(*shape), "full", logits, None, None, k)
        check(dense, out)


def forced_rows(g, threads, vecs, dtype, k):
    """Rows built to reach every path of a ``threads x vecs`` configuration of ``dtype`` with
    a staging of 2048 (float32 scores that are values of the format): ``(x, kv, params)``.
    A +inf score makes the bracket refuse a row (the sampled paths)."""
    from gvr_reference.keys import key_format, round_to_format
    from gvr_reference.register_model import RegisterParams, register_plan

    params = RegisterParams(threads, vecs, capacity=2048, dtype=dtype)
    cap = params.max_n
    kinds = 12
    b = 8 * kinds
    width = cap + 64
    x = g.standard_normal((b, width)).astype(np.float32)
    kv = np.full(b, cap, np.int32)
    for r in range(b):
        kind = r % kinds
        n = int(kv[r])
        pos = sample_positions(n, 0, params)
        j1 = register_plan(n, k, int(pos.size), params.aim_mult).j1
        if kind == 0 and (r // kinds) % 2:  # k spread keys first, the K-th far below the
            # others: the crossing bin holds it alone and is taken whole
            x[r, :k] = 2.0 ** (8 + np.arange(k) / 64)
            x[r, 0] = 100.0
        elif kind == 0 and (r // kinds) % 4 == 2:  # 30% of one value (0.0 as the zeros of a
            # ReLU-weighted row, else -8.0): a crowd of the sample near the bracket's low end
            # (either path) or far below it (the bracket keeps the row)
            x[r, g.random(width) < 0.3] = 0.0 if r // kinds == 2 else -8.0
        elif kind == 1:  # the top sample ranks are huge: the rung is above the K-th key
            x[r, pos[:j1]] = 2.0 ** (10 + np.arange(j1) / 64)
            x[r, 3] = np.inf
        elif kind == 2:  # short rows
            kv[r] = [k - 1, k, 0][r % 3]
        elif kind == 3:  # rows of 4 k scores: the bracket, or unsampled
            kv[r] = 4 * k
            if r % 2:
                x[r, 3] = np.inf
        elif kind == 4:  # longer than the registers hold
            kv[r] = width - r % 4
        elif kind == 5:  # more keys above the rung than the staging, unseen by the sample
            off = np.setdiff1d(np.arange(n), pos)[:3000]
            x[r, off] = 2.0 ** (6 + np.arange(off.size) / 512)
            x[r, 3] = np.inf
        elif kind == 6:  # a crowded tie class at the rung: the keys above it, then ties
            # (rows of fewer than 8,192 scores need a larger crowd to pass the rung's reach)
            x[r, g.random(width) < (0.3 if cap >= 8192 else 0.5)] = 2.5
        elif kind == 7:  # the same crowd with more keys above it than the staging
            if cap >= 8192:
                x[r, g.random(width) < 0.3] = 2.5
            else:  # short rows: the crowd on every sample position, the keys above off them
                x[r, pos] = 2.5
            free = np.setdiff1d(np.flatnonzero(x[r, :n] != 2.5), pos)[:3000]
            x[r, free] = 2.0 ** (4 + np.arange(free.size) / 512)
            # (+inf: the sampled path on bracket configurations too, where the keys above
            # lift the bracket's low end far over the crowd, which then leaves it alone)
            x[r, 3] = np.inf
        elif kind in (8, 9):  # a tie class at the top, unseen by the sample, on half the
            # threads (the others' maxima keep the bracket's low end below it): narrowed from
            # the staging, or (more of them than it holds) from the registers
            half = np.flatnonzero((np.arange(n) // params.vec) % threads < threads // 2)
            if threads < k:  # the low end is the smallest of positions [0, k): keep off them
                half = np.arange(k, n)
            x[r, np.setdiff1d(half, pos)[: 600 if kind == 8 else 3000]] = 6.0
        elif kind == 10:  # the sampled first rung
            x[r, 3] = np.inf
        elif kind == 11:  # ties inside the crossing bin
            x[r] = np.round(x[r] * 64) / 64
    return round_to_format(x, key_format(dtype)), kv, params


@pytest.mark.parametrize(
    "case", FORCED, ids=[f"t{t}v{v}-{d}" + ("" if b else "-sampled") for (t, v), d, b in FORCED]
)
def test_forced_paths_match_the_model(kp, case):
    """Rows built to reach every path (:func:`forced_rows`); the kernel's recorded path equals
    the CPU model's and every answer is exact. A configuration without the bracket takes the
    sampled paths on the same rows."""
    forced_paths(kp, case, early=False)


@pytest.mark.parametrize(
    "case",
    FORCED_EARLY,
    ids=[f"t{t}v{v}-{d}" + ("" if b else "-sampled") for (t, v), d, b in FORCED_EARLY],
)
def test_forced_paths_with_early_loads(kp, case):
    """:func:`test_forced_paths_match_the_model` with the loads issued before the length
    (``early_loads``): the same paths and answers."""
    forced_paths(kp, case, early=True)


#: The forced-path cases run with the bit walk (``RegisterConfig.bit_walk``): one and two mask
#: words a thread (the 1024 x 8 tail slot is bit 0 of the second), a 16-bit shape, and the
#: routed 512 x 8 decode row of 8,193-16,384 scores at most one row a SM (and with early loads).
FORCED_WALK = [
    ((512, 4), "float32", True, False),
    ((1024, 8), "float32", True, False),
    ((1024, 4), "bfloat16", True, False),
    ((512, 8), "float32", True, False),
    ((512, 8), "float32", True, True),
]


@pytest.mark.parametrize(
    "case",
    FORCED_WALK,
    ids=[f"t{t}v{v}-{d}" + ("-early" if e else "") for (t, v), d, _, e in FORCED_WALK],
)
def test_forced_paths_with_bit_walk(kp, case):
    """:func:`test_forced_paths_match_the_model` with the bracket emission walking each
    thread's set bits (``bit_walk``), and with early loads where marked: the same paths and
    answers."""
    *case, early = case
    forced_paths(kp, tuple(case), early=early, bit_walk=True)


def crowd_bracket(row, path, params, value: float) -> bool:
    """Whether the sample of ``row`` is crowded by ``value`` and the row took a bracket
    path."""
    from gvr_reference.keys import order_key
    from gvr_reference.register_model import crowd_key, thread_sample

    if not Path(int(path)).name.startswith("BRACKET"):
        return False
    crowd = crowd_key(thread_sample(order_key(row), 0, params))
    return crowd == int(order_key(np.full(1, value, np.float32))[0])


def forced_paths(kp, case, early, bit_walk=False):
    (threads, vecs), dtype, bracket = case
    k = 512
    x, kv, params = forced_rows(rng(6, threads, vecs, SALT[dtype]), threads, vecs, dtype, k)
    if bit_walk:  # gaussian rows (kind 0) where one lane holds many keys: predicated stores
        x = helpers.plant_lane_crowds(x, (0, 24), threads, vecs, k, dtype)
    params = replace(params, bracket=bracket)
    b = x.shape[0]
    windows = RowWindows(np.zeros(b, np.int64), kv.astype(np.int64))
    want = np.array([int(simulate_row(x[r, : kv[r]], k, params).path) for r in range(b)])
    logits = helpers.device_scores(x, dtype)
    cfg = config(
        threads, vecs, capacity=2048, dtype=dtype, bracket=bracket, early_loads=early,
        bit_walk=bit_walk,
    )  # fmt: skip
    out, _, paths, _ = launch(
        kp, cfg, "decode", logits, torch.from_numpy(kv).cuda(), None, k, paths=True
    )
    got = paths.cpu().numpy()
    assert np.array_equal(got, want), (got[got != want][:8], want[got != want][:8])
    expected = {
        Path.FIRST,
        Path.RESCUE_UNDERESTIMATE,
        Path.RESCUE_OVERFLOW,
        Path.WHOLE_ROW,
        Path.SHORT,
        Path.UNSAMPLED,
        Path.TIE,
    }
    if bracket:
        expected |= {Path.BRACKET, Path.BRACKET_RANK, Path.BRACKET_NARROW, Path.BRACKET_OVERFLOW}
    assert expected <= {Path(int(v)) for v in want}
    crowded = [simulate_row(x[r, : kv[r]], k, params).crowded for r in range(b)]
    assert any(c and w == Path.RESCUE_OVERFLOW for c, w in zip(crowded, want, strict=True))
    if bracket and threads >= k:  # a crowd of the sample far below the bracket keeps the
        # row on it (with fewer threads than k the low end is the smallest of positions
        # [0, k), which the crowd reaches)
        assert any(crowd_bracket(x[r, : kv[r]], want[r], params, -8.0) for r in range(b))
    report = validate.check_topk(x, windows, k, out.cpu().numpy(), None, dtype)
    assert report.ok, report.summary()
    ROWS_CHECKED["n"] += b


@pytest.mark.parametrize("shape", [(1024, 8), (512, 4)], ids=["t1024v8", "t512v4"])
def test_dense_rows_match_the_model(kp, shape):
    """Dense rows (``RegisterConfig.dense_min = 2``) at K = 2048: rows of 4,097 to 4 K scores
    take the sampled paths (the first rung, a rung too high, a crowded tie class) where
    without dense rows they are unsampled, rows of at most 2 K stay unsampled; the recorded
    path equals the CPU model's and every answer is exact, with values and without."""
    from gvr_reference.ladder import dense_aim
    from gvr_reference.register_model import register_plan

    threads, vecs = shape
    k = 2048
    cfg = config(threads, vecs, bracket=False, dense_min=2)
    params = cfg.params
    g = rng(16, threads, vecs)
    b = 40
    width = min(params.max_n, 4 * k)
    x = g.standard_normal((b, width)).astype(np.float32)
    kv = g.integers(2 * k + 1, width + 1, b).astype(np.int32)
    for r in range(b):
        n = int(kv[r])
        pos = sample_positions(n, 0, params)
        kind = r % 5
        if kind == 1:  # the top sample ranks are huge: the rung is above the K-th key
            j1 = register_plan(n, k, int(pos.size), 2, dense_min=2).j1
            x[r, pos[:j1]] = 1000.0 + np.arange(j1, dtype=np.float32)
        elif kind == 2:  # a crowded tie class at the rung: 3 in 4 scores of a row of 4 K
            kv[r] = 4 * k
            x[r, g.random(width) < 0.75] = 0.0
        elif kind == 3:  # unsampled: at most 2 K scores
            kv[r] = g.integers(k + 1, 2 * k + 1)
        elif kind == 4:  # exactly 2 K + 1 and 4 K scores
            kv[r] = [2 * k + 1, 4 * k][r % 2] if 4 * k <= width else 2 * k + 1
    traces = [simulate_row(x[r, : kv[r]], k, params) for r in range(b)]
    want = np.array([int(t.path) for t in traces])
    # the gaussian rows of the band: the first rung, about 11 K / 8 keys staged
    plain = [traces[r] for r in range(b) if r % 5 == 0]
    assert all(t.path == Path.FIRST and k <= t.count1 <= 2 * dense_aim(k) for t in plain)
    want_paths = {Path.FIRST, Path.UNSAMPLED, Path.RESCUE_UNDERESTIMATE, Path.TIE}
    assert want_paths <= {Path(int(v)) for v in want}
    assert all(traces[r].crowded for r in range(b) if r % 5 == 2)
    windows = RowWindows(np.zeros(b, np.int64), kv.astype(np.int64))
    logits = torch.from_numpy(x).cuda()
    kvd = torch.from_numpy(kv).cuda()
    out, _, paths, _ = launch(kp, cfg, "decode", logits, kvd, None, k, paths=True)
    got = paths.cpu().numpy()
    assert np.array_equal(got, want), (got[got != want][:8], want[got != want][:8])
    report = validate.check_topk(x, windows, k, out.cpu().numpy())
    assert report.ok, report.summary()
    out, val, _, _ = launch(kp, cfg, "decode", logits, kvd, None, k, values=True)
    report = validate.check_topk(x, windows, k, out.cpu().numpy(), val.cpu().numpy())
    assert report.ok, report.summary()
    ROWS_CHECKED["n"] += 2 * b


@pytest.mark.parametrize("det", [False, True])
@pytest.mark.parametrize(
    "case", BRACKET_CASES, ids=[f"t{t}v{v}-{d}" for (t, v), d in BRACKET_CASES]
)
def test_bracket_ties_values_and_paths(kp, case, det):
    """Rows on a grid of 1/64 (ties in and around the crossing bin, too few per key for the
    crowd test), gaussian rows and prefill windows: values and both tie modes exact, and the
    recorded paths equal to the model's."""
    from gvr_reference.keys import key_format, round_to_format

    (threads, vecs), dtype = case
    cfg = config(threads, vecs, dtype=dtype)
    cap = cfg.max_n
    params = cfg.params
    for k in (512, 2048):
        if k >= cap:
            continue
        g = rng(8, k, det, threads, vecs, SALT[dtype])
        b = 64
        x = g.standard_normal((b, cap)).astype(np.float32)
        x[::2] = np.round(x[::2] * 64) / 64
        x = round_to_format(x, key_format(dtype))
        kv = g.integers(k + 1, cap + 1, b).astype(np.int32)
        logits = helpers.device_scores(x, dtype)
        kvd = torch.from_numpy(kv).cuda()
        out, val, _, _ = launch(kp, cfg, "decode", logits, kvd, None, k, values=True, det=det)
        assert val.dtype == logits.dtype
        windows = RowWindows(np.zeros(b, np.int64), kv.astype(np.int64))
        vals = helpers.widened(val).numpy()
        rep = validate.check_topk(x, windows, k, out.cpu().numpy(), vals, dtype)
        assert rep.ok, rep.summary()
        if det:
            want = topk_windows(x, windows, k, deterministic=True)
            assert np.array_equal(np.sort(want, axis=1), np.sort(out.cpu().numpy(), axis=1))
        _, _, paths, _ = launch(kp, cfg, "decode", logits, kvd, None, k, paths=True)
        want = np.array([int(simulate_row(x[r, : kv[r]], k, params).path) for r in range(b)])
        got = paths.cpu().numpy()
        assert np.array_equal(got, want), (got[got != want][:8], want[got != want][:8])
        ROWS_CHECKED["n"] += b


@pytest.mark.parametrize("rows", [128, 300], ids=["r1", "r2"])
def test_routed_bracket_above_a_quarter(kp, rows):
    """The router's 512 x 4 bracket rows at K = 2048 over envelopes of 4,097-8,191 scores (K
    above a quarter of the envelope, ``routing.BRACKET_WIDE_K_VECS``; one and two CTAs per
    SM, with the bit walk): every value family at ragged and edge lengths exact, and the
    recorded paths equal to the CPU model's on gaussian and 1/64-grid rows."""
    k = 2048
    for i, family in enumerate(FAMILIES):
        width = (6144, 4097, 8191)[i % 3]
        batch = family_batch(rng(17, rows, i), i, family, rows, k, width)
        logits = to_device(batch)
        kv = torch.from_numpy(batch.kv_lens).cuda()
        out, _, _, route = kp.launch("decode", logits, kv, None, k, n_env=width)
        cfg = route.config
        assert (cfg.family, cfg.threads, cfg.vecs, cfg.bracket, cfg.bit_walk) == (
            "register", 512, 4, True, True
        ), cfg.name  # fmt: skip
        check(batch, out)
    g = rng(18, rows)
    x = g.standard_normal((rows, 6144)).astype(np.float32)
    x[::2] = np.round(x[::2] * 64) / 64
    kv = g.integers(k + 1, 6145, rows).astype(np.int32)
    logits = torch.from_numpy(x).cuda()
    kvd = torch.from_numpy(kv).cuda()
    out, _, paths, route = kp.launch("decode", logits, kvd, None, k, paths=True)
    params = route.config.params
    want = np.array([int(simulate_row(x[r, : kv[r]], k, params).path) for r in range(rows)])
    got = paths.cpu().numpy()
    assert np.array_equal(got, want), (got[got != want][:8], want[got != want][:8])
    assert Path.BRACKET in {Path(int(v)) for v in want}
    windows = RowWindows(np.zeros(rows, np.int64), kv.astype(np.int64))
    report = validate.check_topk(x, windows, k, out.cpu().numpy())
    assert report.ok, report.summary()
    ROWS_CHECKED["n"] += rows


def test_many_rows(kp):
    """A large batch (many CTAs resident per SM) of short and mid rows."""
    for k, width, shape, resident in (
        (512, 4096, (512, 2), 2),
        (2048, 16384, (1024, 4), 1),
        (1024, 4096, (256, 4), 4),
        (512, 8192, (256, 8), 4),
    ):
        batch = make_decode_batch(
            rng(7, k), batch=3000, k=k, width=width, row_stride=width, lengths="ragged"
        )
        logits = to_device(batch)
        kv = torch.from_numpy(batch.kv_lens).cuda()
        out, _, _, _ = launch(kp, config(*shape, resident=resident), "decode", logits, kv, None, k)
        check(batch, out)


def test_phase_stamps_of_register_rows(kp):
    """A ``stamp_phases`` register launch (``tools/time_register_phases.py``) answers
    exactly; every CTA stamps entry, load, reduce and finish in time order, and the bracket
    rows their count, crossing and stage too."""
    from gvr_kernels.abi import KernelArgs
    from gvr_kernels.family import STAMP_WORDS
    from gvr_kernels.register.config import STAMPS

    k, rows, width = 512, 8, 16384
    batch = make_decode_batch(
        rng(8), batch=rows, k=k, width=width, row_stride=width, family="gaussian", lengths="full"
    )
    logits = to_device(batch)
    kv = torch.from_numpy(batch.kv_lens).cuda()
    cfg = config(1024, 4, stamp_phases=True)
    stamps = torch.zeros(rows * STAMP_WORDS, dtype=torch.int32, device="cuda")
    out = torch.full((rows, k), 0x7FFFFFFF, dtype=torch.int32, device="cuda")
    args = KernelArgs(
        logits=logits, lens_a=kv, lens_b=kp.dummy_i, out=out, values=kp.dummy_f,
        workspace=kp.workspace, paths=stamps, k=k, next_n=1, cr_shift=0, parts=1,
        block_max=kp.dummy_f,
    )  # fmt: skip
    kp.get(cfg)(*args)
    torch.cuda.synchronize()
    check(batch, out)
    st = stamps.view(rows, STAMP_WORDS).cpu().numpy().astype(np.int64)[:, : len(STAMPS)]
    assert (st != 0).all()  # gaussian rows take the bracket path: every boundary stamped
    assert ((np.diff(st, axis=1) % (1 << 31)) < 10**8).all()  # in order, under 0.1 s


def test_zz_rows_checked():
    """The run checked at least 20,000 fresh random rows against the oracle."""
    if ROWS_CHECKED["n"] == 0:
        pytest.skip("no device tests ran")
    print(f"\nregister family: rows checked against the oracle: {ROWS_CHECKED['n']} (seed {SEED})")
    assert ROWS_CHECKED["n"] >= 20000
