"""Device tests of the streaming family (``pytest -m gpu`` on an H200).

Every result is checked by the CPU validator of ``gvr_reference`` (the oracle) on fresh random
rows drawn with a new seed per run (printed, so a failure can be replayed with
``GVR_TEST_SEED``), with ``+3e38`` poison beyond every valid length. Kernels come from an
ahead-of-time export (``GVR_AOT_DIR``) or are compiled on the spot.
"""

from __future__ import annotations

from dataclasses import replace

import kernel_helpers as helpers
import numpy as np
import pytest
from gvr_kernels.routing import RAGGED_BULK_MAX_ROWS, cluster_split_route, route_static
from gvr_reference import validate
from gvr_reference.keys import order_key
from gvr_reference.ladder import row_plan
from gvr_reference.model import (
    SPLIT_BINS_MIN_K,
    ModelConfig,
    Path,
    linear_select,
    sample_positions,
    sample_top,
    simulate_row,
    split_bins,
)
from gvr_reference.oracle import topk_windows
from gvr_reference.ragged import MIN_PART, ragged_parts
from gvr_reference.windows import RowWindows
from gvr_reference.workloads import make_decode_batch, make_dense_batch, make_prefill_batch
from kernel_helpers import FAMILIES, SEED, padded_stride, rng, to_device

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

ROWS_CHECKED = {"n": 0}


def check(batch, out, values=None, det=False):
    helpers.check(ROWS_CHECKED, batch, out, values, det)


DECODE = [
    # (k, batch, width, next_n, compress_ratio, family, lengths)
    (512, 1, 262144, 1, 1, "gaussian", "full"),
    (1024, 1, 262144, 1, 1, "dsa_like", "full"),
    (2048, 1, 262144, 1, 1, "gaussian", "full"),
    (512, 8, 131072, 1, 1, "gaussian", "ragged"),
    (2048, 8, 131075, 2, 4, "dsa_like", "ragged"),
    (1024, 32, 65536, 4, 4, "gaussian", "ragged"),
    (2048, 64, 65536, 1, 1, "quantized", "edge"),
    (512, 128, 16384, 3, 1, "gaussian", "edge"),
    (1024, 256, 20001, 2, 1, "gaussian", "ragged"),
    (2048, 1024, 4096, 1, 1, "gaussian", "ragged"),
    (512, 1024, 6000, 1, 4, "dsa_like", "ragged"),
    (1, 16, 50000, 1, 1, "quantized", "ragged"),
    (7, 16, 50000, 2, 1, "gaussian", "edge"),
    (333, 16, 50000, 1, 4, "tie_flood", "ragged"),
    (2047, 16, 50000, 1, 1, "gaussian", "ragged"),
]


@pytest.mark.parametrize(
    "case", DECODE, ids=[f"k{c[0]}-b{c[1]}-n{c[2]}-nn{c[3]}-cr{c[4]}-{c[5]}" for c in DECODE]
)
def test_decode_exact(kp, case):
    k, b, width, nn, cr, family, lengths = case
    batch = make_decode_batch(
        rng(1, *case[:5]),
        batch=b,
        next_n=nn,
        compress_ratio=cr,
        k=k,
        width=width,
        row_stride=padded_stride(width) + 4,
        family=family,
        lengths=lengths,
    )
    _, logits = to_device(batch)
    kv = torch.from_numpy(batch.kv_lens).cuda()
    out, _, _, _ = kp.launch("decode", logits, kv, None, k, next_n=nn, cr=cr)
    check(batch, out)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("k", [512, 1024, 2048])
def test_families_exact(kp, family, k):
    """Every value family, short and long rows, one and several CTAs per row."""
    for b, width, lengths in ((24, 60000, "ragged"), (2, 200003, "full"), (40, 9000, "edge")):
        batch = make_decode_batch(
            rng(2, k, b, FAMILIES.index(family)),
            batch=b,
            k=k,
            width=width,
            row_stride=padded_stride(width),
            family=family,
            lengths=lengths,
        )
        _, logits = to_device(batch)
        kv = torch.from_numpy(batch.kv_lens).cuda()
        out, _, _, _ = kp.launch("decode", logits, kv, None, k)
        check(batch, out)


@pytest.mark.parametrize("det", [False, True])
@pytest.mark.parametrize("k", [512, 2048])
def test_values_and_tie_modes(kp, k, det):
    for b, width, family in (
        (3, 150000, "quantized"),
        (300, 12000, "two_valued"),
        (64, 40000, "signed_zero"),
        (16, 30000, "nan"),
    ):
        batch = make_decode_batch(
            rng(3, k, b, det),
            batch=b,
            k=k,
            width=width,
            row_stride=padded_stride(width),
            family=family,
            lengths="ragged",
        )
        _, logits = to_device(batch)
        kv = torch.from_numpy(batch.kv_lens).cuda()
        out, val, _, _ = kp.launch("decode", logits, kv, None, k, values=True, det=det)
        check(batch, out, val, det=det)


@pytest.mark.parametrize("k", [512, 1024, 2048])
def test_prefill_misaligned_windows(kp, k):
    for rows, width, family, values in (
        (200, 30001, "gaussian", True),
        (300, 9000, "quantized", False),
        (8, 262147, "dsa_like", True),
    ):
        batch = make_prefill_batch(
            rng(4, k, rows),
            rows=rows,
            k=k,
            width=width,
            row_stride=padded_stride(width),
            family=family,
            misaligned=True,
        )
        _, logits = to_device(batch)
        s = torch.from_numpy(batch.row_starts).cuda()
        e = torch.from_numpy(batch.row_ends).cuda()
        out, val, _, _ = kp.launch("prefill", logits, s, e, k, values=values)
        check(batch, out, val)


def test_prefill_more_than_65535_rows(kp):
    k = 512
    batch = make_prefill_batch(
        rng(5), rows=70001, k=k, width=701, row_stride=704, family="gaussian", misaligned=True
    )
    _, logits = to_device(batch)
    out, _, _, _ = kp.launch(
        "prefill",
        logits,
        torch.from_numpy(batch.row_starts).cuda(),
        torch.from_numpy(batch.row_ends).cuda(),
        k,
    )
    check(batch, out)


@pytest.mark.parametrize("k", [512, 2048])
def test_full_rows(kp, k):
    for rows, width in ((5, 100003), (200, 10001)):
        batch = make_dense_batch(
            rng(6, k, rows),
            rows=rows,
            k=k,
            width=width,
            row_stride=padded_stride(width),
            family="gaussian",
        )
        _, logits = to_device(batch)
        out, val, _, _ = kp.launch("full", logits, None, None, k, values=True)
        check(batch, out, val)


def _sampled_positions(n, k, params):
    plan = row_plan(n, k, 0, params)
    return sample_positions(plan, 4), plan


def _model_paths(x, kv, k, route):
    """The CPU model's traces of the rows ``x[r, :kv[r]]`` under ``route``, and each row's
    CTAs (a ragged split gives each row its CTAs by length: short and unsampled rows one)."""
    parts = np.full(x.shape[0], route.parts, np.int64)
    if route.config.ragged:
        parts = ragged_parts(kv, route.grid, MIN_PART)
    traces = [
        simulate_row(x[r, : kv[r]], k, ModelConfig(route.ladder, parts=int(parts[r])))
        for r in range(x.shape[0])
    ]
    return traces, parts


def _launch_paths(kp, x, kv, k, route, parts):
    """Launch ``route`` on the rows with path recording: ``(out, paths)``, a ragged split's
    recorded CTAs (``code | parts << 8``) checked against ``parts`` and stripped."""
    out, _, paths, _ = kp.launch(
        "decode",
        torch.from_numpy(x).cuda(),
        torch.from_numpy(kv).cuda(),
        None,
        k,
        paths=True,
        route=route,
    )
    got = paths.cpu().numpy()
    if route.config.ragged:
        assert np.array_equal(got >> 8, parts), (got >> 8, parts)
        got = got & 0xFF
    return out, got


@pytest.mark.parametrize("split", [False, True, "bulk", "cluster"])
def test_forced_paths_match_the_model(kp, split):
    """Rows built to reach every path; the kernel's recorded path equals the CPU model's and
    every answer is exact. ``split``: one CTA a row (more rows than a ragged split of many
    rows takes), a static split, a ragged split of many rows (``"bulk"``), where the long
    rows meet in pairs beside rows of one CTA, or a cluster split (``"cluster"``: four CTAs
    a row meeting through DSMEM, the paths of a static split)."""
    k, n = 2048, 131076
    b = {False: RAGGED_BULK_MAX_ROWS + 88, True: 9, "bulk": 140, "cluster": 9}[split]
    if split == "cluster":
        route = cluster_split_route(kp.spec, rows=b, n_env=n, k=k, cluster=4)
    else:
        # (9 rows route to a cluster split without values: the workspace split is the route
        # with values, launched without them)
        route = route_static(kp.spec, rows=b, n_env=n, k=k, with_values=split is True)
    assert (route.parts > 1) == bool(split)
    assert route.config.ragged == (split == "bulk")
    assert bool(route.config.cluster) == (split == "cluster")
    g = rng(7, [False, True, "bulk", "cluster"].index(split))
    x = g.standard_normal((b, n)).astype(np.float32)
    pos, plan = _sampled_positions(n, k, route.ladder)
    kv = np.full(b, n, np.int32)
    free = np.setdiff1d(np.arange(n), pos)
    for r in range(b):
        kind = r % (9 if split in (True, "cluster") else 10)
        if kind == 1:  # the top sample ranks are huge: the first rung is too high
            x[r, pos[: plan.j1]] = 1000.0 + np.arange(plan.j1, dtype=np.float32)
        elif kind == 2:  # every sampled score is huge: no rung reaches k survivors
            x[r, pos] = 1000.0 + np.arange(pos.size, dtype=np.float32)
        elif kind == 3:  # a crowded tie class at the rung: the keys above it, then ties
            x[r, g.random(n) < 0.3] = 7.0
        elif kind == 6:  # more keys above the rung than the staging, unseen by the sample
            x[r, free[: route.ladder.capacity + 5]] = (
                50.0 + np.arange(route.ladder.capacity + 5, dtype=np.float32) / 1024
            )
        elif kind == 7:  # a crowd seen by the sample that the row barely holds: the tie scan
            # finds fewer than k ties (then the retry rung, or the rescue for split rows)
            x[r, pos[: 3 * plan.j1]] = 7.0
        elif kind == 8:  # a crowd at the rung with k or more keys above it
            x[r, g.random(n) < 0.3] = 7.0
            x[r, free[: 3 * k]] = 9.0 + np.arange(3 * k, dtype=np.float32) / 1024
        elif kind == 9:  # every score equal (the deterministic answer: the first k)
            x[r] = np.float32(-0.0) if r % 2 else np.float32(3.0)
        elif kind == 4:  # short rows
            kv[r] = [k - 1, k, 0][r % 3]
        elif kind == 5:  # unsampled rows (at most dense_min * k scores: not dense)
            kv[r] = 2 * k + 1
    windows = RowWindows(np.zeros(b, np.int64), kv.astype(np.int64))
    traces, parts = _model_paths(x, kv, k, route)
    want = np.array([int(t.path) for t in traces])
    out, got = _launch_paths(kp, x, kv, k, route, parts)
    if route.config.ragged:
        assert parts.max() > 1 and parts.min() == 1
    assert np.array_equal(got, want), (got[got != want][:8], want[got != want][:8])
    expected = {
        Path.FIRST,
        Path.RESCUE_UNDERESTIMATE,
        Path.RESCUE_OVERFLOW,
        Path.SHORT,
        Path.UNSAMPLED,
        Path.TIE,
    } | (set() if split else {Path.RETRY})
    assert expected <= {Path(int(v)) for v in want}
    # a crowded rung whose tie scan finds too few continues as an underestimate
    after_scan = Path.RESCUE_UNDERESTIMATE if split else Path.RETRY
    assert any(t.crowded and t.path == after_scan for t in traces)
    assert any(t.crowded and t.path == Path.FIRST for t in traces)
    report = validate.check_topk(x, windows, k, out.cpu().numpy())
    assert report.ok, report.summary()
    ROWS_CHECKED["n"] += b


@pytest.mark.parametrize("split", [False, True, "bulk", "cluster"])
def test_dense_rows_match_the_model(kp, split):
    """Dense rows (``StreamingConfig.dense_min = 2``) at K = 2048: rows of (2 K, 2 aim]
    scores take the sampled paths (the first rung, a rung too high, a crowded tie class)
    where without dense rows they are unsampled; rows of at most 2 K stay unsampled. One
    CTA a row, a static split, a ragged split of many rows, a cluster split of eight CTAs a
    row over 32,768 scores (the launch ``tools/tune_variants.py`` weighs against the register
    row there); the recorded path equals the CPU model's and every answer is exact."""
    from gvr_reference.ladder import dense_aim

    k, n = 2048, 131076
    b = {False: RAGGED_BULK_MAX_ROWS + 88, True: 24, "bulk": 140, "cluster": 12}[split]
    if split == "cluster":
        n = 32768
        route = cluster_split_route(kp.spec, rows=b, n_env=n, k=k, cluster=8)
    else:
        route = route_static(kp.spec, rows=b, n_env=n, k=k)
    assert (route.parts > 1) == bool(split) and route.config.ragged == (split == "bulk")
    route = replace(route, config=replace(route.config, dense_min=2))
    params = route.ladder
    top = 2 * k * params.aim_mult
    g = rng(17, [False, True, "bulk", "cluster"].index(split))
    x = g.standard_normal((b, n)).astype(np.float32)
    kv = g.integers(2 * k + 1, top + 1, b).astype(np.int32)
    for r in range(b):
        kind = r % 6
        if kind == 1:  # the top sample ranks are huge: the rung is above the K-th key
            pos, plan = _sampled_positions(int(kv[r]), k, params)
            x[r, pos[: plan.j1]] = 1000.0 + np.arange(plan.j1, dtype=np.float32)
        elif kind == 2:  # a tie class of 60 % at the rung
            x[r, g.random(n) < 0.6] = 0.5
        elif kind == 3:  # unsampled: at most 2 K scores
            kv[r] = g.integers(k + 1, 2 * k + 1)
        elif kind == 4:  # the band's ends
            kv[r] = [2 * k + 1, top][(r // 6) % 2]
        elif kind == 5:  # longer rows: sampled as without dense rows
            kv[r] = g.integers(top + 1, n + 1)
    windows = RowWindows(np.zeros(b, np.int64), kv.astype(np.int64))
    traces, parts = _model_paths(x, kv, k, route)
    want = np.array([int(t.path) for t in traces])
    # the gaussian rows of the band: the first rung, about 11 K / 8 survivors
    plain = [traces[r] for r in range(b) if r % 6 == 0]
    assert all(t.path == Path.FIRST and k <= t.count1 <= 2 * dense_aim(k) for t in plain)
    assert Path.UNSAMPLED in {t.path for t in traces}
    out, got = _launch_paths(kp, x, kv, k, route, parts)
    assert np.array_equal(got, want), (got[got != want][:8], want[got != want][:8])
    report = validate.check_topk(x, windows, k, out.cpu().numpy())
    assert report.ok, report.summary()
    ROWS_CHECKED["n"] += b


def _staged_selection(x, kv, k, traces, route, parts):
    """The CPU twin's linear selection (``gvr_reference.model.linear_select``) of each row
    that selects among its staged survivors (the first rung, or a retry; unsampled rows from
    key 0): a :class:`~gvr_reference.model.LinearSelect`, None (the radix levels), or
    ``"other"`` for rows that select elsewhere (rescues, ties, short rows, binned split
    rows). A workspace split row that took its first rung is bracketed up to its sample's
    largest key, as its finishing CTA bins the slab."""
    out = []
    for r, t in enumerate(traces):
        keys = order_key(x[r, : kv[r]])
        if t.path == Path.UNSAMPLED:
            lo = 0
        elif t.path == Path.FIRST:
            lo = int(t.t1) + int(t.crowded)
        elif t.path == Path.RETRY:
            lo = int(t.t2)
        else:
            out.append("other")
            continue
        staged = keys[keys >= lo]
        hi = int(staged.max())
        if t.path == Path.FIRST and parts[r] > 1 and not route.config.cluster:
            cfg = ModelConfig(route.ladder, parts=int(parts[r]))
            hi = sample_top(x[r, : kv[r]], k, cfg)
        out.append(linear_select(staged, k, lo, hi))
    return out


@pytest.mark.parametrize("values,det", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("k", [512, 2048])
@pytest.mark.parametrize("rows", [280, 70, 10])
def test_staged_selection_by_the_linear_level(kp, rows, k, values, det):
    """Rows built to reach each way the streaming family selects among its staged survivors
    (``gvr_kernels.device.linear``, CPU twin ``gvr_reference.model.linear_select``): the
    crossing bin taken whole, ranked (a pile of near values at the K-th), or left to the
    radix levels (a tie class larger than ``LINEAR_CROSS_MAX`` at the K-th, an infinite
    score, an unsampled row holding ``-inf``); unsampled rows bracketed from their smallest
    key (one of ``k + 1`` scores, one far below the others, is taken whole). One
    512-thread CTA a row (280 rows: past two a SM, where this envelope takes no ragged
    split), one 1024-thread CTA (70), a split row (10: a workspace
    split, or a cluster split where routed, at K = 2048 without values, whose sampled rows
    meet on the survivor bins, so only its unsampled rows select this way); with values and
    the deterministic tie rule. The recorded path equals the model's and
    every answer is exact."""
    n = 65540
    b = rows
    route = route_static(kp.spec, rows=b, n_env=n, k=k, with_values=values, deterministic=det)
    split = route.parts > 1
    assert split == (rows == 10) and not route.config.ragged
    g = rng(23, rows, k, values, det)
    x = g.standard_normal((b, n)).astype(np.float32)
    kv = np.full(b, n, np.int32)
    for r in range(b):
        kind = r % 10
        row = x[r]
        v = np.partition(row, n - k + 39)[n - k + 39] if kind in (1, 2) else None  # (k-39)-th
        if kind == 1:  # near values at the K-th: a crossing bin of a few dozen keys
            row[g.choice(n, 90, replace=False)] = v + np.float32(1e-6) * np.arange(90)
        elif kind == 6:  # an unsampled row of k + 1 scores, one far below the others: its
            # crossing bin holds exactly the keys wanted (taken whole)
            kv[r] = k + 1
            row[g.integers(k + 1)] = -1000.0
        elif kind == 2:  # a tie class at the K-th, more keys than the crossing bin's staging
            row[g.choice(n, 300, replace=False)] = v
        elif kind == 3:  # an infinite score: no bracket
            row[g.integers(n)] = np.inf
        elif kind in (4, 7):  # unsampled rows, one with near values at its K-th
            kv[r] = g.integers(k + 1, 2 * k + 1) if kind == 4 else g.integers(k + 200, 2 * k + 1)
            if kind == 7:
                w = np.sort(row[: kv[r]])[::-1][k - 20]
                below = np.flatnonzero(row[: kv[r]] < w)  # (most of this row is above w)
                row[g.choice(below, 50, replace=False)] = w + np.float32(1e-6) * np.arange(50)
        elif kind == 5:  # an unsampled row holding -inf
            kv[r] = g.integers(k + 1, 2 * k + 1)
            row[g.integers(kv[r])] = -np.inf
    traces, parts = _model_paths(x, kv, k, route)
    want = np.array([int(t.path) for t in traces])
    ways = _staged_selection(x, kv, k, traces, route, parts)
    if route.config.cluster and k >= SPLIT_BINS_MIN_K:  # sampled rows meet on their bins
        ways = [
            w if t.path == Path.UNSAMPLED else "other" for w, t in zip(ways, traces, strict=True)
        ]
    seen = {
        "none" if w is None else w if isinstance(w, str) else ("rank" if w.ranked else "whole")
        for w in ways
    }
    assert {"none", "rank", "whole"} <= seen, seen
    out, val, paths, _ = kp.launch(
        "decode", torch.from_numpy(x).cuda(), torch.from_numpy(kv).cuda(), None, k,
        values=values, det=det, paths=True, route=route,
    )  # fmt: skip
    got = paths.cpu().numpy()
    assert np.array_equal(got, want), (got[got != want][:8], want[got != want][:8])
    windows = RowWindows(np.zeros(b, np.int64), kv.astype(np.int64))
    o = out.cpu().numpy()
    report = validate.check_topk(x, windows, k, o, None if val is None else val.cpu().numpy())
    assert report.ok, report.summary()
    if det:
        want_idx = topk_windows(x, windows, k, deterministic=True)
        assert np.array_equal(np.sort(want_idx, axis=1), np.sort(o, axis=1)), "tie choice"
    ROWS_CHECKED["n"] += b


def _serving_lengths(g, rows, width, k):
    """Row lengths like a serving batch: about three in four short (up to 4,096, log-uniform),
    some mid-length, a few near the width; an empty row, a row of ``k`` and a full row."""
    c = g.random(rows)
    short = np.exp(g.uniform(0.0, np.log(4096), rows))
    mid = g.uniform(4096, max(4097, width // 4), rows)
    long = g.uniform(width // 2, width + 1, rows)
    n = np.where(c < 0.75, short, np.where(c < 0.93, mid, long)).astype(np.int64)
    special = [width, 0, k][:rows]
    n[: len(special)] = special
    return g.permutation(np.minimum(n, width))


#: (k, rows, width, value family): ragged split launches (the router's, by rows and width).
RAGGED = [
    (512, 32, 262144, "gaussian"),
    (2048, 64, 262144, "dsa_like"),
    (1024, 60, 140000, "gaussian"),
    (2048, 40, 250000, "tie_flood"),
    (512, 48, 131076, "quantized"),
    (1024, 66, 200000, "gaussian"),
    # more rows than SMs: the 512-thread ragged split, rows meeting in min(rows, extra) slots
    (512, 256, 262144, "gaussian"),
    (2048, 200, 131076, "dsa_like"),
    (1024, 500, 140000, "tie_flood"),
    (2048, 133, 262144, "quantized"),
    # up to two rows per SM from a shorter envelope (RAGGED_BULK_FEW_MIN_N)
    (512, 200, 100000, "gaussian"),
    (2048, 264, 65540, "dsa_like"),
    (512, 256, 65536, "quantized"),
]


@pytest.mark.parametrize("case", RAGGED, ids=[f"k{c[0]}-b{c[1]}-n{c[2]}-{c[3]}" for c in RAGGED])
def test_ragged_split_follows_the_lengths(kp, case):
    """A ragged split launch hands its CTAs out by the rows' lengths: the CTAs each row got
    (recorded beside its path) equal ``gvr_reference.ragged``'s, every path equals the CPU
    model's for that many CTAs, and every answer is exact (poison past every length)."""
    k, rows, width, family = case
    g = rng(9, *case[:3])
    dense = make_dense_batch(g, rows=rows, k=k, width=width, row_stride=width, family=family)
    x = np.array(dense.logits, dtype=np.float32)
    n = _serving_lengths(g, rows, width, k)
    for r in range(rows):
        x[r, n[r] :] = 3e38
    route = route_static(kp.spec, rows=rows, n_env=width, k=k)
    assert route.config.ragged and route.parts > 1
    parts = ragged_parts(n, route.grid, MIN_PART)
    assert parts.sum() <= route.grid
    kv = torch.from_numpy(n.astype(np.int32)).cuda()
    out, _, paths, _ = kp.launch("decode", torch.from_numpy(x).cuda(), kv, None, k, paths=True)
    got = paths.cpu().numpy()
    assert np.array_equal(got >> 8, parts), (np.flatnonzero((got >> 8) != parts)[:8], n)
    want = [
        int(simulate_row(x[r, : n[r]], k, ModelConfig(route.ladder, parts=int(parts[r]))).path)
        for r in range(rows)
    ]
    assert np.array_equal(got & 0xFF, want), (got & 0xFF, want)
    windows = RowWindows(np.zeros(rows, np.int64), n)
    report = validate.check_topk(x, windows, k, out.cpu().numpy())
    assert report.ok, report.summary()
    ROWS_CHECKED["n"] += rows


@pytest.mark.parametrize("family", FAMILIES)
def test_ragged_split_families(kp, family):
    """Every value family in ragged decode batches (next_n 2, compress_ratio 4) and ragged
    prefill windows (misaligned starts) on the ragged split (of few rows and of more rows than
    SMs); every answer exact."""
    k = 2048
    for rows, width in ((32, 200000), (60, 140000), (256, 140000), (160, 90000)):
        g = rng(10, rows, FAMILIES.index(family))
        dense = make_dense_batch(g, rows=rows, k=k, width=width, row_stride=width, family=family)
        x = np.array(dense.logits, dtype=np.float32)
        n = _serving_lengths(g, rows, width, k)
        # decode: rows // 2 requests of next_n = 2 rows, compress_ratio 4
        kv_req = np.maximum(0, 4 * n[0::2] + 1 + g.integers(0, 4, n[0::2].size)).astype(np.int32)
        t = np.maximum(0, kv_req.repeat(2) - 2 + np.tile([0, 1], rows // 2) + 1)
        lens = np.minimum(t >> 2, width)
        xd = x.copy()
        for r in range(rows):
            xd[r, lens[r] :] = 3e38
        route = route_static(kp.spec, rows=rows, n_env=width, k=k)
        assert route.config.ragged
        kv = torch.from_numpy(kv_req).cuda()
        out, _, _, _ = kp.launch("decode", torch.from_numpy(xd).cuda(), kv, None, k, next_n=2, cr=4)
        windows = RowWindows(np.zeros(rows, np.int64), lens.astype(np.int64))
        report = validate.check_topk(xd, windows, k, out.cpu().numpy())
        assert report.ok, report.summary()
        # prefill: windows [s, s + n) of the same lengths at misaligned starts
        starts = np.array([g.integers(0, width - m + 1) for m in n], np.int64)
        a = torch.from_numpy(starts.astype(np.int32)).cuda()
        b = torch.from_numpy((starts + n).astype(np.int32)).cuda()
        route = route_static(kp.spec, rows=rows, n_env=width, k=k, mode="prefill")
        assert route.config.ragged
        out, _, _, _ = kp.launch("prefill", torch.from_numpy(x).cuda(), a, b, k)
        report = validate.check_topk(x, RowWindows(starts, n), k, out.cpu().numpy())
        assert report.ok, report.summary()
        ROWS_CHECKED["n"] += 2 * rows


#: (mode, rows, width, lengths): ragged split launches where no row's share reaches one extra
#: CTA (the hand-out's early answer: CTA ``b`` serves row ``b``) and, beside each, the same
#: rows with one row long enough to take a share (the full hand-out).
NO_SPLIT = [
    ("decode", 256, 140000, "equal"),
    ("decode", 256, 140000, "one_long"),
    ("prefill", 200, 131076, "equal"),
    ("prefill", 200, 131076, "one_long"),
    ("decode", 133, 262144, "equal"),
]


@pytest.mark.parametrize("case", NO_SPLIT, ids=["-".join(map(str, c)) for c in NO_SPLIT])
def test_ragged_split_without_a_split_row(kp, case):
    """A ragged split launch whose rows all take one CTA answers after the first scan (CTA
    ``b`` serves row ``b``, its window passed on from the hand-out): the CTAs each row got
    equal ``gvr_reference.ragged``'s (all one, or one row's share where it is long enough),
    and every answer is exact, in decode and prefill (misaligned window starts)."""
    mode, rows, width, lengths = case
    k = 1024
    g = rng(11, rows, width, NO_SPLIT.index(case))
    dense = make_dense_batch(g, rows=rows, k=k, width=width, row_stride=width, family="gaussian")
    x = np.array(dense.logits, dtype=np.float32)
    n = np.full(rows, width - 7 if mode == "prefill" else width, np.int64)
    if lengths == "one_long":
        n[:] = width // 3
        n[rows // 2] = width
    route = route_static(kp.spec, rows=rows, n_env=width, k=k, mode=mode)
    assert route.config.ragged and route.parts > 1
    parts = ragged_parts(n, route.grid, MIN_PART)
    assert (parts.max() > 1) == (lengths == "one_long")
    if mode == "decode":
        starts = np.zeros(rows, np.int64)
        a, b = torch.from_numpy(n.astype(np.int32)).cuda(), None
    else:
        starts = g.integers(0, width - n + 1).astype(np.int64)
        a = torch.from_numpy(starts.astype(np.int32)).cuda()
        b = torch.from_numpy((starts + n).astype(np.int32)).cuda()
    out, _, paths, _ = kp.launch(mode, torch.from_numpy(x).cuda(), a, b, k, paths=True)
    got = paths.cpu().numpy()
    assert np.array_equal(got >> 8, parts), (np.flatnonzero((got >> 8) != parts)[:8], n)
    report = validate.check_topk(x, RowWindows(starts, n), k, out.cpu().numpy())
    assert report.ok, report.summary()
    ROWS_CHECKED["n"] += rows


def test_split_workspace_counters_are_restored(kp):
    """The last CTA of each workspace split row restores the row's counter (arrivals, slab
    fill) to zero and clears every slab entry written in the launch (its valid bit with it),
    so the next launch or graph replay finds the slot clean: launches on one workspace whose
    rows change (full, then ragged lengths, then full rows of other scores) are each exact,
    and after each the whole slot is zero. (With values:
    without them 4 rows route to a cluster split, no workspace.)"""
    from gvr_kernels.streaming.config import SLAB_VALID, WS_HEADER_WORDS

    kp.workspace.fill_(0)
    for seed, lengths in ((8, "full"), (9, "ragged"), (10, "full")):
        batch = make_decode_batch(
            rng(seed), batch=4, k=1024, width=200000, row_stride=200000, family="gaussian",
            lengths=lengths,
        )  # fmt: skip
        _, logits = to_device(batch)
        kv = torch.from_numpy(batch.kv_lens).cuda()
        out, val, _, route = kp.launch("decode", logits, kv, None, 1024, values=True)
        torch.cuda.synchronize()
        assert route.parts > 1 and not route.config.cluster
        words = route.workspace_words // batch.rows
        slots = kp.workspace[: route.workspace_words].view(torch.int32).view(batch.rows, words)
        assert int(slots[:, :WS_HEADER_WORDS].abs().sum()) == 0  # counter and pad words
        # Every entry written was read and cleared whole (score bits and position word).
        assert SLAB_VALID == 1 << 31
        assert int(slots[:, WS_HEADER_WORDS:].abs().sum()) == 0
        check(batch, out, val)


@pytest.mark.parametrize("rows", [4, 32, "x8"])
@pytest.mark.parametrize("det", [False, True])
@pytest.mark.parametrize("k", [1024, 2048])
def test_split_rows_on_survivor_bins(kp, rows, k, det):
    """Split rows whose survivor bins (``gvr_reference.model.split_bins``) put the crossing
    bin in the middle of the bins, in the saturated top bin (more than ``k`` keys planted
    above the sample's largest, where the sample does not look), holding a tie class the top
    ``k`` cuts (the deterministic mode's smallest indices), and on rows of negative scores:
    4 rows on clusters of eight CTAs (``"x8"``) meet on those bins; a static split (4 rows)
    and a ragged one (32) gather their slabs and select by the linear level. With values,
    every answer exact."""
    n = 200003
    if rows == "x8":
        rows = 4
        route = cluster_split_route(
            kp.spec, rows=rows, n_env=n, k=k, cluster=8, with_values=True, deterministic=det
        )
    else:
        route = route_static(kp.spec, rows=rows, n_env=n, k=k, with_values=True, deterministic=det)
    assert route.parts > 1 and route.config.ragged == (rows >= 32)
    batch = make_decode_batch(
        rng(10, rows, k, det), batch=rows, k=k, width=n, row_stride=padded_stride(n),
        family="gaussian", lengths="full",
    )  # fmt: skip
    g = rng(11, rows, k, det)
    pos, _ = _sampled_positions(n, k, route.ladder)
    free = np.setdiff1d(np.arange(n), pos)
    x = batch.logits
    for r in range(rows):
        kind = r % 4
        if kind == 1:  # more than k keys above everything the sample saw
            at = g.choice(free, 2 * k + 3, replace=False)
            x[r, at] = 1000.0 + np.arange(2 * k + 3, dtype=np.float32) / 8
        elif kind == 2:  # a tie class at the k-th score, where the sample does not look
            x[r] = np.round(x[r] * 64) / 64
            v = np.sort(x[r])[::-1][k - 10]
            x[r, g.choice(free[x[r, free] < v], 30, replace=False)] = v
        elif kind == 3:  # every score negative
            x[r] = x[r] - np.float32(40.0)
    parts = np.full(rows, route.parts, np.int64)
    if route.config.ragged:
        parts = ragged_parts(np.full(rows, n), route.grid, MIN_PART)
    bins = [
        split_bins(x[r], k, ModelConfig(route.ladder, parts=int(parts[r]))) for r in range(rows)
    ]
    assert all(b is not None for b in bins)
    assert any(b.crossing < 255 for b in bins[0::4])
    assert all(b.crossing == 255 and b.above == 0 and b.count >= k for b in bins[1::4])
    for r in range(2, rows, 4):
        top = np.sort(x[r])[::-1]
        kth = top[k - 1]
        assert (top[:k] == kth).sum() < (x[r] == kth).sum()  # the top k cut the class
    _, logits = to_device(batch)
    kv = torch.from_numpy(batch.kv_lens).cuda()
    out, val, _, _ = kp.launch("decode", logits, kv, None, k, values=True, det=det, route=route)
    check(batch, out, val, det=det)


#: (cluster, k, rows, width, next_n, compress_ratio): cluster split launches, forced
#: (``gvr_kernels.routing.cluster_split_route``); the third is a routed cell
#: (``gvr_kernels.routing._cluster_split_replaces``: decode launches with deterministic ties;
#: without, its workspace split's short chunks take it), the first two the cells at 32,768
#: scores it was measured at and not routed to.
CLUSTER_SPLITS = [
    (8, 2048, 8, 32768, 1, 1),
    (4, 2048, 16, 30000, 1, 1),
    (8, 1024, 8, 131072, 1, 1),
    (2, 512, 64, 65536, 1, 1),
    (2, 2048, 24, 60000, 2, 1),
    (4, 1024, 16, 131075, 3, 4),
    (8, 512, 6, 262144, 1, 1),
    (16, 2048, 2, 262147, 1, 1),
]


@pytest.mark.parametrize(
    "case", CLUSTER_SPLITS, ids=[f"x{c[0]}-k{c[1]}-b{c[2]}-n{c[3]}" for c in CLUSTER_SPLITS]
)
def test_cluster_split_exact(kp, case):
    """Cluster splits (``StreamingConfig.cluster``: a row's CTAs in one thread-block cluster,
    meeting through DSMEM) on every value family at lengths from 0 to the width (the ragged
    and edge length sets, next_n and compress_ratio), with values and both tie modes, and
    on misaligned prefill windows, and the indices-only launch of the routed form: every
    answer exact."""
    cluster, k, b, width, nn, cr = case
    if cluster > kp.spec.max_cluster_size:
        pytest.skip(f"{kp.spec.name} schedules clusters of at most {kp.spec.max_cluster_size}")
    for i, family in enumerate(FAMILIES):
        det = bool(i % 2)
        batch = make_decode_batch(
            rng(12, *case, i), batch=b, next_n=nn, compress_ratio=cr, k=k, width=width,
            row_stride=padded_stride(width) + 4, family=family,
            lengths="ragged" if i % 3 else "edge",
        )  # fmt: skip
        _, logits = to_device(batch)
        kv = torch.from_numpy(batch.kv_lens).cuda()
        route = cluster_split_route(
            kp.spec, rows=batch.rows, n_env=width, k=k, cluster=cluster, with_values=True,
            deterministic=det,
        )  # fmt: skip
        out, val, _, _ = kp.launch(
            "decode", logits, kv, None, k, next_n=nn, cr=cr, values=True, det=det, route=route
        )
        check(batch, out, val, det=det)
        if i < 2:
            route = cluster_split_route(
                kp.spec, rows=batch.rows, n_env=width, k=k, cluster=cluster, deterministic=det
            )
            out, _, _, _ = kp.launch(
                "decode", logits, kv, None, k, next_n=nn, cr=cr, det=det, route=route
            )
            check(batch, out, det=det)
    batch = make_prefill_batch(
        rng(13, *case), rows=b, k=k, width=width, row_stride=padded_stride(width),
        family="dsa_like", misaligned=True,
    )  # fmt: skip
    _, logits = to_device(batch)
    s = torch.from_numpy(batch.row_starts).cuda()
    e = torch.from_numpy(batch.row_ends).cuda()
    route = cluster_split_route(
        kp.spec, rows=b, n_env=width, k=k, cluster=cluster, mode="prefill", with_values=True
    )
    out, val, _, _ = kp.launch("prefill", logits, s, e, k, values=True, route=route)
    check(batch, out, val)


def test_phase_stamps_of_a_split_row(kp):
    """A ``stamp_phases`` split launch (``tools/time_split_phases.py``) answers exactly; every
    CTA stamps its phases in time order up to its arrival (a workspace split stamps no
    ``reserve``: one atomic reserves and arrives), and exactly one CTA a row publishes,
    gathers and finishes it."""
    from dataclasses import replace

    from gvr_kernels.abi import KernelArgs
    from gvr_kernels.streaming.config import STAMP_WORDS, STAMPS

    batch = make_decode_batch(
        rng(9), batch=2, k=512, width=262144, row_stride=262144, family="gaussian", lengths="full"
    )
    _, logits = to_device(batch)
    kv = torch.from_numpy(batch.kv_lens).cuda()
    route = route_static(kp.spec, rows=2, n_env=262144, k=512)
    assert route.config.split and route.parts > 1
    cfg = replace(route.config, stamp_phases=True)
    stamps = torch.zeros(route.grid * STAMP_WORDS, dtype=torch.int32, device="cuda")
    out = torch.full((2, 512), 0x7FFFFFFF, dtype=torch.int32, device="cuda")
    args = KernelArgs(
        logits=logits, lens_a=kv, lens_b=kp.dummy_i, out=out, values=kp.dummy_f,
        workspace=kp.workspace, paths=stamps, k=512, next_n=1, cr_shift=0, parts=route.parts,
        block_max=kp.dummy_f,
    )  # fmt: skip
    kp.get(cfg)(*args)
    torch.cuda.synchronize()
    check(batch, out)
    st = stamps.view(2, route.parts, STAMP_WORDS).cpu().numpy().astype(np.int64)
    upto = [STAMPS.index(p) for p in ("entry", "window", "sample", "rung", "stream", "arrive")]
    fin, gather, publish = (STAMPS.index(p) for p in ("finish", "gather", "publish"))
    for row in st:
        assert (row[:, upto] != 0).all() and (row[:, STAMPS.index("reserve")] == 0).all()
        assert ((np.diff(row[:, upto], axis=1) % (1 << 31)) < 10**8).all()  # under 0.1 s
        done = np.flatnonzero(row[:, fin])
        assert len(done) == 1 and row[done[0], gather] != 0 and row[done[0], publish] != 0
        assert (row[:, gather] != 0).sum() == 1 and (row[:, publish] != 0).sum() == 1


def test_zz_rows_checked():
    """The run checked at least 5,000 fresh random rows against the oracle."""
    if ROWS_CHECKED["n"] == 0:
        pytest.skip("no device tests ran")
    print(f"\nrows checked against the oracle: {ROWS_CHECKED['n']} (seed {SEED})")
    assert ROWS_CHECKED["n"] >= 5000
