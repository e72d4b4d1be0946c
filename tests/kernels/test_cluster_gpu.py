"""Device tests of the cluster-register family (``pytest -m gpu`` on an H200).

Every result is checked by the CPU validator of ``gvr_reference`` on fresh random rows (seed
printed; replay with ``GVR_TEST_SEED``), with ``+3e38`` poison beyond every valid length, for
each configuration of :data:`SHAPES` forced directly (not through the router), with and
without the bracket path, and the path every row took is compared with the CPU model
(``gvr_reference.cluster_model``).
"""

from __future__ import annotations

import kernel_helpers as helpers
import numpy as np
import pytest
from gvr_reference import validate
from gvr_reference.cluster_model import ClusterParams, sample_positions, simulate_row, thread_sample
from gvr_reference.keys import order_key
from gvr_reference.model import Path
from gvr_reference.oracle import topk_windows
from gvr_reference.register_model import crowded_sample, register_plan
from gvr_reference.windows import RowWindows
from gvr_reference.workloads import make_decode_batch, make_dense_batch, make_prefill_batch
from kernel_helpers import FAMILIES, SEED, rng

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

ROWS_CHECKED = {"n": 0}
#: (cluster, threads, vecs, bracket): every shape the router uses, with and without the
#: bracket path ...
ROUTED = [
    (c, t, 4, b) for b in (True, False) for c, t in ((4, 512), (8, 512), (4, 1024), (8, 1024))
] + [(16, 512, 4, True)]  # the non-portable 16-CTA cluster: routed with its bracket only
#: The clusters of envelopes of 4,097-16,384 (``routing._small_cluster``): bracket only.
SMALL = [(4, 512, 1, True), (4, 512, 2, True), (2, 512, 2, True), (2, 512, 4, True)]
ROUTED += SMALL
#: ... and the extremes of the family.
SHAPES = ROUTED + [(2, 1024, 4, True), (2, 1024, 4, False)]
#: The bracket shapes of :data:`ROUTED`.
BRACKETED = [s for s in ROUTED if s[3]]
#: The 16-bit formats; their routed shapes are the float32 ones with two vectors (eight
#: scores each) a thread, but 1024-thread CTAs take no bracket (its 16-bit code spills).
DTYPES16 = ("bfloat16", "float16")
ROUTED16 = [(4, 512, 2, True), (8, 512, 2, True), (4, 1024, 2, False), (16, 512, 2, True)]


def ids(shapes):
    return [f"x{c}t{t}v{v}" + ("_bracket" if b else "") for c, t, v, b in shapes]


#: (shape, dtype) of the value-family path test.
FAMILY_CASES = [(s, "float32") for s in SHAPES] + [(s, d) for d in DTYPES16 for s in ROUTED16]
#: (shape, dtype, det, bracket) of the forced bracket-path test.
BRACKET_CASES = [
    (s, "float32", d, b) for s in BRACKETED for d in (False, True) for b in (False, True)
]
BRACKET_CASES += [(s, dt, dt == "float16", True) for dt in DTYPES16 for s in ROUTED16 if s[3]]
SALT = {"float32": 0, "bfloat16": 1, "float16": 2}


def config(cluster, threads, vecs, bracket=False, **kw):
    from gvr_kernels.cluster import ClusterConfig

    return ClusterConfig(cluster=cluster, threads=threads, vecs=vecs, bracket=bracket, **kw)


def launch(kp, cfg, mode, logits, a, b, k, **kw):
    """Run ``cfg`` (its call-mode fields replaced by the arguments, as the provider does)."""
    from gvr_kernels.routing import Route

    rows = logits.shape[0]
    route = Route(
        config=cfg, parts=1, grid=rows * cfg.cluster, workspace_words=0, n_env=logits.shape[1]
    )
    return kp.launch(mode, logits, a, b, k, route=route, **kw)


def check(batch, out, values=None, det=False):
    helpers.check(ROWS_CHECKED, batch, out, values, det)


def cap_of(shape):
    return 4 * shape[0] * shape[1] * shape[2]


@pytest.mark.parametrize("shape", SHAPES, ids=ids(SHAPES))
@pytest.mark.parametrize("k", [512, 1024, 2048])
def test_families_exact(kp, shape, k):
    """Every value family at lengths from 0 to past the cluster (the oversize rows take the
    whole-row selection from memory), one launch per family."""
    cap = cap_of(shape)
    width = cap + 37
    for i, family in enumerate(FAMILIES):
        batch = make_decode_batch(
            rng(1, k, *map(int, shape), i),
            batch=72,
            k=k,
            width=width,
            row_stride=helpers.padded_stride(width) + 4,
            family=family,
            lengths="ragged" if i % 2 else "edge",
        )
        logits = helpers.to_device(batch)[1]
        kv = torch.from_numpy(batch.kv_lens).cuda()
        out, _, _, _ = launch(kp, config(*shape), "decode", logits, kv, None, k)
        check(batch, out)


@pytest.mark.parametrize("shape", ROUTED, ids=ids(ROUTED))
def test_mtp_and_compression(kp, shape):
    cap = cap_of(shape)
    for k, nn, cr in ((512, 2, 1), (1024, 3, 4), (2048, 4, 4), (7, 2, 1)):
        width = cap if cr == 1 else cap - 5
        batch = make_decode_batch(
            rng(2, k, nn, cr, *map(int, shape)),
            batch=32,
            next_n=nn,
            compress_ratio=cr,
            k=k,
            width=width,
            row_stride=helpers.padded_stride(width),
            family="dsa_like",
            lengths="edge",
        )
        logits = helpers.to_device(batch)[1]
        kv = torch.from_numpy(batch.kv_lens).cuda()
        out, _, _, _ = launch(kp, config(*shape), "decode", logits, kv, None, k, next_n=nn, cr=cr)
        check(batch, out)


@pytest.mark.parametrize("det", [False, True])
@pytest.mark.parametrize("shape", ROUTED, ids=ids(ROUTED))
def test_values_and_tie_modes(kp, shape, det):
    cap = cap_of(shape)
    for k, family in ((512, "quantized"), (2048, "two_valued"), (1024, "signed_zero")):
        for fam in (family, "nan", "constant", "tie_flood"):
            batch = make_decode_batch(
                rng(3, k, det, *map(int, shape), FAMILIES.index(fam)),
                batch=64,
                k=k,
                width=cap,
                row_stride=cap,
                family=fam,
                lengths="ragged",
            )
            logits = helpers.to_device(batch)[1]
            kv = torch.from_numpy(batch.kv_lens).cuda()
            out, val, _, _ = launch(
                kp, config(*shape), "decode", logits, kv, None, k, values=True, det=det
            )
            check(batch, out, val, det=det)


@pytest.mark.parametrize("shape", ROUTED, ids=ids(ROUTED))
def test_prefill_windows_and_full_rows(kp, shape):
    cap = cap_of(shape)
    for k in (512, 2048):
        for det in (False, True):
            batch = make_prefill_batch(
                rng(4, k, det, *map(int, shape)),
                rows=100,
                k=k,
                width=cap + 9,
                row_stride=helpers.padded_stride(cap + 9),
                family="gaussian" if not det else "quantized",
                misaligned=True,
            )
            logits = helpers.to_device(batch)[1]
            s = torch.from_numpy(batch.row_starts).cuda()
            e = torch.from_numpy(batch.row_ends).cuda()
            out, val, _, _ = launch(
                kp, config(*shape), "prefill", logits, s, e, k, values=True, det=det
            )
            check(batch, out, val, det=det)
        dense = make_dense_batch(
            rng(5, k, *map(int, shape)),
            rows=48,
            k=k,
            width=cap - 1,
            row_stride=cap,
            family="dsa_like",
        )
        logits = helpers.to_device(dense)[1]
        out, _, _, _ = launch(kp, config(*shape), "full", logits, None, None, k)
        check(dense, out)


SAMPLED = [s for s in ROUTED if not s[3]]


@pytest.mark.parametrize("shape", SAMPLED, ids=ids(SAMPLED))
def test_forced_paths_match_the_model(kp, shape):
    """Rows built to reach every path of the family; the kernel's recorded path equals the
    CPU model's and every answer is exact."""
    cluster, threads, vecs, _ = shape
    cap = cap_of(shape)
    k = 512
    params = ClusterParams(cluster, threads, vecs, capacity=4096)
    kinds = 9
    b = 6 * kinds
    width = cap + 64
    g = rng(6, *map(int, shape))
    x = g.standard_normal((b, width)).astype(np.float32)
    kv = np.full(b, cap, np.int32)
    for r in range(b):
        kind = r % kinds
        n = int(kv[r])
        pos = sample_positions(n, 0, params)
        j1 = register_plan(n, k, int(pos.size), params.aim_mult).j1
        if kind == 1:  # the top sample ranks are huge: the rung is above the K-th key
            x[r, pos[:j1]] = 1000.0 + np.arange(j1, dtype=np.float32)
        elif kind == 2:  # short rows
            kv[r] = [k - 1, k, 0][r % 3]
        elif kind == 3:  # rows of 4 k scores: unsampled
            kv[r] = 4 * k
        elif kind == 4:  # longer than the cluster holds
            kv[r] = width - r % 4
        elif kind == 5:  # more keys above the rung than the staging, unseen by the sample
            off = np.setdiff1d(np.arange(n), pos)[:6000]
            x[r, off] = 50.0 + np.arange(off.size, dtype=np.float32) / 64
        elif kind == 6:  # a crowded tie class at the rung: the keys above it, then ties
            x[r, g.random(width) < 0.3] = 3.0
        elif kind == 7:  # the same crowd with more keys above it than the staging
            x[r, g.random(width) < 0.3] = 3.0
            free = np.setdiff1d(np.flatnonzero(x[r, :n] != 3.0), pos)[:6000]
            x[r, free] = 9.0 + np.arange(free.size, dtype=np.float32) / 64
        elif kind == 8:  # the crowd in one CTA's chunk only (skewed rows)
            x[r, : n // cluster] += 4.0
    windows = RowWindows(np.zeros(b, np.int64), kv.astype(np.int64))
    want = np.array([int(simulate_row(x[r, : kv[r]], k, params).path) for r in range(b)])
    logits = torch.from_numpy(x).cuda()
    cfg = config(*shape, capacity=4096)
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
    assert expected <= {Path(int(v)) for v in want}
    report = validate.check_topk(x, windows, k, out.cpu().numpy())
    assert report.ok, report.summary()
    ROWS_CHECKED["n"] += b


@pytest.mark.parametrize("shape", ROUTED, ids=ids(ROUTED))
def test_prefill_paths_match_the_model(kp, shape):
    """Prefill windows starting at 1, 2 and 3 modulo 4 (the lead lanes of vector 0 and the
    tail owned by position): the recorded path of every row equals the CPU model's."""
    from gvr_reference.cluster_model import simulate_windows

    cap = cap_of(shape)
    params = config(*shape).params
    for k in (512, 2048):
        batch = make_prefill_batch(
            rng(9, k, *map(int, shape)), rows=64, k=k, width=cap + 9,
            row_stride=helpers.padded_stride(cap + 9), family="dsa_like", misaligned=True,
        )  # fmt: skip
        logits = helpers.to_device(batch)[1]
        s = torch.from_numpy(batch.row_starts).cuda()
        e = torch.from_numpy(batch.row_ends).cuda()
        out, _, paths, _ = launch(kp, config(*shape), "prefill", logits, s, e, k, paths=True)
        check(batch, out)
        lengths = batch.row_ends - batch.row_starts
        traces = simulate_windows(batch.logits, batch.row_starts, lengths, k, params)
        want = np.array([int(t.path) for t in traces])
        got = paths.cpu().numpy()
        assert np.array_equal(got, want), (got[got != want][:8], want[got != want][:8])
        assert {1, 2, 3} <= {int(v) for v in batch.row_starts % 4}


@pytest.mark.parametrize("case", FAMILY_CASES, ids=[f"{ids([c])[0]}-{d}" for c, d in FAMILY_CASES])
def test_paths_on_value_families(kp, case):
    """The recorded path of every row of every value family equals the CPU model's (16-bit
    rows: the value families rounded to the format)."""
    shape, dtype = case
    cfg = config(*shape, dtype=dtype)
    cap = cfg.max_n
    params = cfg.params
    k = 2048
    for i, family in enumerate(FAMILIES):
        batch = make_decode_batch(
            rng(8, *map(int, shape), i, SALT[dtype]), batch=16, k=k, width=cap, row_stride=cap,
            family=family, lengths="ragged", dtype=dtype,
        )  # fmt: skip
        logits = helpers.device_scores(batch.arena, dtype)[:, : batch.width]
        kv = torch.from_numpy(batch.kv_lens).cuda()
        out, _, paths, _ = launch(kp, cfg, "decode", logits, kv, None, k, paths=True)
        check(batch, out)
        want = np.array(
            [int(simulate_row(batch.logits[r, : batch.kv_lens[r]], k, params).path)
             for r in range(batch.rows)]
        )  # fmt: skip
        got = paths.cpu().numpy()
        assert np.array_equal(got, want), (family, got[got != want][:8], want[got != want][:8])


@pytest.mark.parametrize(
    "case",
    BRACKET_CASES,
    ids=[f"{ids([c])[0]}-{t}-det{d:d}-b{b:d}" for c, t, d, b in BRACKET_CASES],
)
def test_bracket_paths_match_the_model(kp, case):
    """Rows built to reach every path of a bracket configuration (and the sampled paths its
    rows fall back to), with values; ``bracket=False`` runs the same rows on the sampled
    configuration. The recorded path equals the CPU model's and every answer is exact."""
    bracket_paths(kp, case, values=True, bit_walk=False)


#: The bracket cases run with the bit walk (``ClusterConfig.bit_walk``), without values (the
#: walk writes the positions) and with them (the walk stages the crossing bin): the smallest
#: and the largest routed bracket CTAs, and a 16-bit shape.
WALK_CASES = [
    ((4, 512, 4, True), "float32", False, True),
    ((8, 1024, 4, True), "float32", False, True),
]
WALK_CASES += [(ROUTED16[0], "bfloat16", False, True)]


@pytest.mark.parametrize("values", [False, True], ids=["idx", "values"])
@pytest.mark.parametrize(
    "case", WALK_CASES, ids=[f"{ids([c])[0]}-{t}" for c, t, _, _ in WALK_CASES]
)
def test_bracket_paths_with_bit_walk(kp, case, values):
    """:func:`test_bracket_paths_match_the_model` with the bracket emission walking each
    thread's set bits: the same paths and answers."""
    bracket_paths(kp, case, values=values, bit_walk=True)


def bracket_paths(kp, case, values, bit_walk):
    from gvr_reference.cluster_model import bracket_forced_rows

    shape, dtype, det, bracket = case
    shape = (*shape[:3], bracket)
    k = 512
    cfg = config(
        *shape, capacity=2048, with_values=values, deterministic=det, dtype=dtype,
        bit_walk=bit_walk,
    )  # fmt: skip
    cap = cfg.max_n
    g = rng(10, *map(int, shape), det, SALT[dtype])
    x, kv, kinds = bracket_forced_rows(g, cfg.params, k, cap + 64)
    if bit_walk:  # gaussian rows (kind 0) where one lane holds many keys: predicated stores
        x = helpers.plant_lane_crowds(x, (0, 10), cfg.threads, cfg.vecs, k, dtype)
    b = x.shape[0]
    windows = RowWindows(np.zeros(b, np.int64), kv.astype(np.int64))
    want = np.array([int(simulate_row(x[r, : kv[r]], k, cfg.params).path) for r in range(b)])
    out, val, paths, _ = launch(
        kp, cfg, "decode", helpers.device_scores(x, dtype), torch.from_numpy(kv).cuda(), None, k,
        paths=True, values=values, det=det,
    )  # fmt: skip
    got = paths.cpu().numpy()
    assert np.array_equal(got, want), (got[got != want][:8], want[got != want][:8])
    if bracket:
        expected = {
            Path.BRACKET, Path.BRACKET_RANK, Path.BRACKET_NARROW, Path.BRACKET_OVERFLOW,
            Path.WHOLE_ROW, Path.SHORT,
        }  # fmt: skip
        taken = {Path(int(v)) for v in want}
        assert expected <= taken, sorted(taken)
        assert taken & {Path.TIE, Path.FIRST}, sorted(taken)  # the sampled fallback
        # the zeros of kind 0's third row crowd its sample; far below the bracket they
        # leave the row on it where the model says so
        zero = np.flatnonzero(kinds == 0)[2]
        assert crowded_sample(thread_sample(order_key(x[zero, : kv[zero]]), 0, cfg.params))
    vals = None
    if values:
        assert val.dtype == helpers.device_scores(x[:1, :8], dtype).dtype
        vals = helpers.widened(val).numpy()
    report = validate.check_topk(x, windows, k, out.cpu().numpy(), vals, dtype)
    assert report.ok, report.summary()
    if det:
        want_det = topk_windows(x, windows, k, deterministic=True)
        assert np.array_equal(np.sort(want_det, axis=1), np.sort(out.cpu().numpy(), axis=1))
    ROWS_CHECKED["n"] += b


#: The 16-CTA shapes, the one not routed (16 x 1024) included.
SIXTEEN = [(16, 512, 4, True), (16, 1024, 4, True)]


@pytest.mark.parametrize("shape", SIXTEEN, ids=ids(SIXTEEN))
def test_sixteen_cta_clusters(kp, shape):
    """The non-portable 16-CTA clusters (one row of up to 131,072 / 262,144 scores): the
    forced bracket rows with their recorded paths equal to the CPU model's, then full rows
    (deterministic ties) of two value families; every answer exact."""
    from gvr_reference.cluster_model import bracket_forced_rows

    cap = cap_of(shape)
    k = 512
    cfg = config(*shape, capacity=2048, record_paths=True)
    x, kv, _ = bracket_forced_rows(rng(11, *map(int, shape)), cfg.params, k, cap + 64, 2)
    out, _, paths, _ = launch(
        kp, cfg, "decode", torch.from_numpy(x).cuda(), torch.from_numpy(kv).cuda(), None, k,
        paths=True,
    )  # fmt: skip
    want = np.array([int(simulate_row(x[r, : kv[r]], k, cfg.params).path) for r in range(len(kv))])
    got = paths.cpu().numpy()
    assert np.array_equal(got, want), (got[got != want][:8], want[got != want][:8])
    windows = RowWindows(np.zeros(len(kv), np.int64), kv.astype(np.int64))
    report = validate.check_topk(x, windows, k, out.cpu().numpy())
    assert report.ok, report.summary()
    ROWS_CHECKED["n"] += len(kv)
    for k, family in ((1024, "gaussian"), (2048, "dsa_like")):
        dense = make_dense_batch(
            rng(12, k, *map(int, shape)), rows=6, k=k, width=cap, row_stride=cap, family=family
        )
        logits = helpers.to_device(dense)[1]
        full = config(*shape, mode="full", deterministic=True, capacity=2048)
        out, _, _, _ = launch(kp, full, "full", logits, None, None, k, det=True)
        check(dense, out, det=True)


def test_many_rows(kp):
    """More clusters than fit the GPU at once (waves of clusters)."""
    for k, shape in ((512, (8, 512, 4, True)), (2048, (4, 1024, 4, False))):
        width = cap_of(shape)
        batch = make_decode_batch(
            rng(7, k), batch=600, k=k, width=width, row_stride=width, lengths="ragged"
        )
        logits = helpers.to_device(batch)[1]
        kv = torch.from_numpy(batch.kv_lens).cuda()
        out, _, _, _ = launch(kp, config(*shape), "decode", logits, kv, None, k)
        check(batch, out)


def test_zz_rows_checked():
    """The run checked at least 20,000 fresh random rows against the oracle."""
    if ROWS_CHECKED["n"] == 0:
        pytest.skip("no device tests ran")
    print(f"\ncluster family: rows checked against the oracle: {ROWS_CHECKED['n']} (seed {SEED})")
    assert ROWS_CHECKED["n"] >= 20000
