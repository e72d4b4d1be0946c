"""Device tests of the 16-bit configurations (``pytest -m gpu`` on an H200): bfloat16 and
float16 logits read in place (vectors of 8 scores, 16-bit order keys) by the routed streaming,
register-resident and cluster-register configurations.

Rows come from the reference workloads rounded to the dtype (``dtype=`` of
``gvr_reference.workloads``: the arrays hold the exact float32 widening the oracle reads), so
every answer is checked by the CPU validator on the very scores the kernel read, and every
recorded path is compared with the CPU model of the 16-bit key space
(``ModelConfig(dtype=...)``; the register-resident and cluster-register families':
``gvr_reference.register_model`` and ``gvr_reference.cluster_model`` with ``dtype``). Every
value family (the tie-heavy tail included: ties are far more common in 16 bits), decode
with ``next_n`` and ``compress_ratio``, prefill windows at every start modulo 8, dense rows,
values in the logits dtype and the deterministic tie mode, single and split rows.
"""

from __future__ import annotations

import kernel_helpers as helpers
import numpy as np
import pytest
from gvr_kernels.routing import route_static
from gvr_reference.cluster_model import simulate_row as cluster_row
from gvr_reference.model import ModelConfig, Path, sample_positions, simulate_row
from gvr_reference.register_model import simulate_row as register_row
from gvr_reference.workloads import (
    TAIL_FAMILIES,
    make_decode_batch,
    make_dense_batch,
    make_prefill_batch,
)
from kernel_helpers import FAMILIES, rng

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

ROWS_CHECKED = {"n": 0}
PATHS_SEEN: dict = {}
DTYPES = ("bfloat16", "float16")


def stride8(width, extra=0):
    return -(-width // 8) * 8 + extra


def upload(batch):
    """The batch's arena in its 16-bit dtype on the device and the logits view, bit for bit
    the scores the oracle reads (every score is a value of the dtype)."""
    return helpers.device_scores(batch.arena, batch.dtype)[:, : batch.width]


def run_and_check(kp, batch, mode, a, b, k, *, values=False, det=False, next_n=1, cr=1):
    """One launch recording paths (each equal to the 16-bit model's), one with the call's
    ``values``/``det``; both answers checked by the oracle on the widened scores."""
    logits = upload(batch)
    out, _, paths, route = kp.launch(mode, logits, a, b, k, paths=True, next_n=next_n, cr=cr)
    helpers.check(ROWS_CHECKED, batch, out)
    cfg = route.config
    assert cfg.dtype == batch.dtype, cfg.name
    if cfg.family in ("register", "cluster"):
        kind = cfg.family
        row_model = register_row if kind == "register" else cluster_row

        def model(v, lead):
            return row_model(v, k, cfg.params, lead=lead)
    else:
        assert cfg.family == "streaming", cfg.name
        kind = "split" if route.parts > 1 else "single"
        mcfg = ModelConfig(route.ladder, parts=route.parts, dtype=batch.dtype)

        def model(v, lead):
            return simulate_row(v, k, mcfg, lead=lead)

    w = batch.windows
    want = []
    for r in range(batch.rows):
        s, n = int(w.starts[r]), int(w.lengths[r])
        want.append(int(model(batch.logits[r, s : s + n], s & 7).path))
    want = np.array(want)
    got = paths.cpu().numpy()
    bad = got != want
    assert np.array_equal(got, want), (cfg.name, got[bad][:8], want[bad][:8])
    for code in want:
        PATHS_SEEN[(batch.dtype, kind, Path(int(code)))] = True
    if values or det:
        out, val, _, _ = kp.launch(
            mode, logits, a, b, k, values=values, det=det, next_n=next_n, cr=cr
        )
        assert val is None or val.dtype == logits.dtype
        v = None if val is None else helpers.widened(val)
        helpers.check(ROWS_CHECKED, batch, out, v, det=det)


DECODE = [
    # (k, batch, width, next_n, compress_ratio, family, lengths)
    (512, 1, 262144, 1, 1, "gaussian", "full"),
    (2048, 1, 262144, 1, 1, "dsa_like", "full"),
    (1024, 8, 131072, 1, 1, "gaussian", "ragged"),
    (2048, 8, 131075, 2, 4, "dsa_like", "ragged"),
    (1024, 32, 65536, 4, 4, "quantized", "ragged"),
    (512, 128, 16384, 3, 1, "gaussian", "edge"),
    (2048, 300, 20001, 2, 1, "gaussian", "ragged"),
    (512, 1024, 6000, 1, 4, "dsa_like", "ragged"),
    (512, 64, 4096, 1, 1, "gaussian", "ragged"),
    (2048, 600, 4003, 2, 4, "dsa_like", "edge"),
    (7, 16, 50000, 2, 1, "gaussian", "edge"),
    (2047, 16, 50000, 1, 1, "tie_flood", "ragged"),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "case", DECODE, ids=[f"k{c[0]}-b{c[1]}-n{c[2]}-nn{c[3]}-cr{c[4]}-{c[5]}" for c in DECODE]
)
def test_decode_exact(kp, case, dtype):
    k, b, width, nn, cr, family, lengths = case
    i = DECODE.index(case)
    batch = make_decode_batch(
        rng(21, *case[:5], DTYPES.index(dtype)),
        batch=b,
        next_n=nn,
        compress_ratio=cr,
        k=k,
        width=width,
        row_stride=stride8(width, 8),
        family=family,
        lengths=lengths,
        dtype=dtype,
    )
    kv = torch.from_numpy(batch.kv_lens).cuda()
    run_and_check(kp, batch, "decode", kv, None, k, values=bool(i % 2), det=bool(i % 3 == 0),
                  next_n=nn, cr=cr)  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("family", FAMILIES + TAIL_FAMILIES)
@pytest.mark.parametrize("k", [512, 2048])
def test_families_exact(kp, family, k, dtype):
    """Every value family, short and long rows, one and several CTAs per row."""
    for j, (b, width, lengths) in enumerate(
        ((24, 60000, "ragged"), (2, 200003, "full"), (40, 9000, "edge"))
    ):
        batch = make_decode_batch(
            rng(22, k, b, (FAMILIES + TAIL_FAMILIES).index(family), DTYPES.index(dtype)),
            batch=b,
            k=k,
            width=width,
            row_stride=stride8(width),
            family=family,
            lengths=lengths,
            dtype=dtype,
        )
        kv = torch.from_numpy(batch.kv_lens).cuda()
        run_and_check(kp, batch, "decode", kv, None, k, values=j == 1, det=j == 2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [512, 1024, 2048])
def test_prefill_misaligned_windows(kp, k, dtype):
    for rows, width, family, values in (
        (200, 30001, "gaussian", True),
        (300, 9000, "two_valued", False),
        (8, 262147, "dsa_like", True),
        (64, 40000, "levels16", True),
    ):
        batch = make_prefill_batch(
            rng(23, k, rows, DTYPES.index(dtype)),
            rows=rows,
            k=k,
            width=width,
            row_stride=stride8(width),
            family=family,
            misaligned=True,
            dtype=dtype,
        )
        assert len({int(s) & 7 for s in batch.row_starts}) >= 6 or rows < 64
        s = torch.from_numpy(batch.row_starts).cuda()
        e = torch.from_numpy(batch.row_ends).cuda()
        run_and_check(kp, batch, "prefill", s, e, k, values=values, det=not values)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [512, 2048])
def test_full_rows(kp, k, dtype):
    for rows, width in ((5, 100003), (200, 10001)):
        batch = make_dense_batch(
            rng(24, k, rows, DTYPES.index(dtype)),
            rows=rows,
            k=k,
            width=width,
            row_stride=stride8(width),
            family="gaussian",
            dtype=dtype,
        )
        run_and_check(kp, batch, "full", None, None, k, values=True)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("split", [False, True])
def test_forced_paths_match_the_model(kp, split, dtype):
    """Rows built to reach the fallback paths in 16 bits (a crowd at the rung, more keys
    above the rung than the staging, a sample that overshoots, short and unsampled rows)."""
    from gvr_reference.keys import key_format, round_to_format
    from gvr_reference.ladder import row_plan
    from gvr_reference.windows import RowWindows
    from gvr_reference.workloads import DecodeBatch

    k, n = 2048, 131072
    b = 9 if split else 280  # (one CTA a row: past two rows a SM, no ragged split)
    route = route_static(kp.spec, rows=b, n_env=n, k=k, dtype=dtype)
    assert (route.parts > 1) == split
    fmt = key_format(dtype)
    g = rng(25, split, DTYPES.index(dtype))
    x = g.standard_normal((b, n)).astype(np.float32)
    plan = row_plan(n, k, 0, route.ladder)
    pos = sample_positions(plan, 8)
    free = np.setdiff1d(np.arange(n), pos)
    kv = np.full(b, n, np.int32)
    cap = route.ladder.capacity
    for r in range(b):
        kind = r % (9 if split else 10)
        if kind == 1:  # the sample's top ranks huge: the first rung is too high (and the
            # retry rung, 3 j1, a few thousand scores below them: 16-bit rungs are coarse)
            top = plan.j1 * 5 // 2
            x[r, pos[:top]] = 900.0 + np.arange(top, dtype=np.float32)
        elif kind == 2:  # every sampled score huge: no rung reaches k survivors
            x[r, pos] = 900.0 + np.arange(pos.size, dtype=np.float32) % 50
        elif kind == 3:  # a crowded tie class at the rung
            x[r, g.random(n) < 0.3] = 7.0
        elif kind == 6:  # more keys above the rung than the staging, unseen by the sample
            x[r, free[: cap + 5]] = 50.0
        elif kind == 7:  # a crowd the row barely holds: the tie scan finds too few
            x[r, pos[: 3 * plan.j1]] = 7.0
        elif kind == 8:  # a crowd at the rung with k or more keys above it
            x[r, g.random(n) < 0.3] = 7.0
            x[r, free[: 3 * k]] = 9.0 + np.arange(3 * k, dtype=np.float32) / 64
        elif kind == 9:
            x[r] = np.float32(-0.0) if r % 2 else np.float32(3.0)
        elif kind == 4:
            kv[r] = [k - 1, k, 0][r % 3]
        elif kind == 5:
            kv[r] = 3 * k + 1
    x = round_to_format(x, fmt)
    batch = DecodeBatch(
        logits=x, arena=x, k=k, width=n, row_stride=n,
        windows=RowWindows(np.zeros(b, np.int64), kv.astype(np.int64)),
        family="forced", dtype=dtype, kv_lens=kv,
    )  # fmt: skip
    run_and_check(kp, batch, "decode", torch.from_numpy(kv).cuda(), None, k, det=True)
    kind = "split" if split else "single"
    seen = {p for (d, s, p) in PATHS_SEEN if d == dtype and s == kind}
    want = {Path.FIRST, Path.TIE, Path.RESCUE_OVERFLOW, Path.SHORT, Path.UNSAMPLED}
    assert want <= seen, seen


@pytest.mark.parametrize("dtype", DTYPES)
def test_rows_of_fewer_scores_than_a_vector(kp, dtype):
    """16-bit rows of 0-15 scores at K = 1-3 on the streaming family's many-row core, prefill
    windows at every misalignment ending near the end of the row: a row holding no whole
    vector (eight scores) is unsampled (``gvr_reference.ladder.row_plan``), so nothing past its
    window is sampled; the paths equal the model's and every answer is exact."""
    from gvr_reference import validate
    from gvr_reference.keys import key_format, round_to_format
    from gvr_reference.windows import RowWindows

    rows, width = 600, 65536
    g = rng(20, DTYPES.index(dtype))
    x = round_to_format(g.standard_normal((rows, width)).astype(np.float32), key_format(dtype))
    logits = helpers.device_scores(x, dtype)
    n = (np.arange(rows) % 16).astype(np.int64)
    starts = width - n - (np.arange(rows) // 16) % 8
    s_t = torch.from_numpy(starts.astype(np.int32)).cuda()
    e_t = torch.from_numpy((starts + n).astype(np.int32)).cuda()
    for k in (1, 2, 3):
        out, _, paths, route = kp.launch("prefill", logits, s_t, e_t, k, paths=True)
        assert route.config.family == "streaming" and route.parts == 1, route.config.name
        mcfg = ModelConfig(route.ladder, parts=1, dtype=dtype)
        want = np.array(
            [
                int(
                    simulate_row(
                        x[r, starts[r] : starts[r] + n[r]], k, mcfg, lead=starts[r] & 7
                    ).path
                )
                for r in range(rows)
            ]
        )
        assert np.array_equal(paths.cpu().numpy(), want)
        report = validate.check_topk(x, RowWindows(starts, n), k, out.cpu().numpy(), None, dtype)
        assert report.ok, report.summary()
        ROWS_CHECKED["n"] += rows


def test_zz_rows_checked():
    """Every streaming path was taken in both dtypes, and the register-resident and
    cluster-register families served some rows of each; the run checked at least 5,000 rows
    per dtype."""
    if ROWS_CHECKED["n"] == 0:
        pytest.skip("no device tests ran")
    print(f"\nrows checked against the oracle: {ROWS_CHECKED['n']} (seed {helpers.SEED})")
    print("paths:", sorted((d, s, p.name) for d, s, p in PATHS_SEEN))
    for dtype in DTYPES:
        for kind in ("single", "split"):
            assert (dtype, kind, Path.TIE) in PATHS_SEEN
        assert (dtype, "single", Path.RETRY) in PATHS_SEEN
        assert (dtype, "split", Path.RESCUE_UNDERESTIMATE) in PATHS_SEEN
        assert any(d == dtype and s == "register" for d, s, _ in PATHS_SEEN)
        assert any(d == dtype and s == "cluster" for d, s, _ in PATHS_SEEN)
    assert ROWS_CHECKED["n"] >= 10000
