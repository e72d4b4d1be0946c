"""Device tests of the tie-heavy tail (``pytest -m gpu`` on an H200): rows whose K-th value
sits in a huge tie class or a narrow value range, through the routed family of each shape.

Every family of ``gvr_reference.workloads.TAIL_FAMILIES`` at every n in {32,768, 131,072,
262,144} (whichever family the router picks: cluster-register, streaming split or single),
b in {1, 8, 32, 128} and K in {512, 1024, 2048} (decode), prefill windows
at each n, values and the deterministic tie mode; every answer checked by the oracle, every
recorded path equal to the CPU model's (``Path.TIE`` wherever the sample sees the crowd).
"""

from __future__ import annotations

import kernel_helpers as helpers
import numpy as np
import pytest
from gvr_kernels.routing import route_static
from gvr_reference.cluster_model import simulate_row as cluster_row
from gvr_reference.model import ModelConfig, Path
from gvr_reference.model import simulate_row as streaming_row
from gvr_reference.ragged import MIN_PART, ragged_parts
from gvr_reference.register_model import simulate_row as register_row
from gvr_reference.workloads import TAIL_FAMILIES, make_decode_batch, make_prefill_batch
from kernel_helpers import padded_stride, rng, to_device

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

ROWS_CHECKED = {"n": 0}
PATHS_SEEN: dict = {}
K_ALL = (512, 1024, 2048)
SHAPES = [(n, b) for n in (32768, 131072, 262144) for b in (1, 8, 32, 128)]


def model_paths(route, logits, starts, lengths, k):
    """The CPU model's path of every row for the routed family, and the CTAs of each row of a
    ragged split launch (``None`` for other launches)."""
    cfg = route.config
    ragged = route.family == "streaming" and cfg.ragged
    parts = np.full(len(lengths), route.parts, np.int64)
    if ragged:
        # A ragged split launch gives each row its CTAs by length (gvr_reference.ragged).
        parts = ragged_parts(np.asarray(lengths), route.grid, MIN_PART)
    if route.family == "register":

        def sim(x, lead, r):
            return register_row(x, k, cfg.params, lead=lead)
    elif route.family == "cluster":

        def sim(x, lead, r):
            return cluster_row(x, k, cfg.params, lead=lead)
    else:

        def sim(x, lead, r):
            return streaming_row(x, k, ModelConfig(route.ladder, parts=int(parts[r])), lead=lead)

    want = []
    for r, (s, n) in enumerate(zip(starts, lengths, strict=True)):
        s, n = int(s), int(n)
        want.append(int(sim(logits[r, s : s + n], s % cfg.key_format.vec, r).path))
    return np.array(want), (parts if ragged else None)


def run_and_check(kp, batch, mode, a, b, k, det, values):
    """One launch recording paths (checked against the model), one with ``values``/``det``;
    both answers checked by the oracle."""
    rows, width = batch.logits.shape
    route = route_static(kp.spec, rows=rows, n_env=width, k=k, mode=mode)
    _, logits = to_device(batch)
    out, _, paths, _ = kp.launch(mode, logits, a, b, k, paths=True)
    helpers.check(ROWS_CHECKED, batch, out)
    want, parts = model_paths(route, batch.logits, batch.windows.starts, batch.windows.lengths, k)
    got = paths.cpu().numpy()
    if parts is not None:
        # A ragged split records each row's CTAs beside its path.
        assert np.array_equal(got >> 8, parts), (got >> 8, parts)
        got = got & 0xFF
    bad = got != want
    assert np.array_equal(got, want), (route.config.name, got[bad][:8], want[bad][:8])
    for code in want:
        PATHS_SEEN[(route.family, route.parts > 1, Path(int(code)))] = True
    if det or values:
        out, val, _, _ = kp.launch(mode, logits, a, b, k, values=values, det=det)
        helpers.check(ROWS_CHECKED, batch, out, val, det=det)


@pytest.mark.parametrize("k", K_ALL)
@pytest.mark.parametrize("family", TAIL_FAMILIES)
@pytest.mark.parametrize("shape", SHAPES, ids=[f"n{n}-b{b}" for n, b in SHAPES])
def test_tail_decode(kp, shape, family, k):
    n, b = shape
    i = TAIL_FAMILIES.index(family) + SHAPES.index(shape) + K_ALL.index(k)
    det, values = bool(i % 2), bool((i // 2) % 2)
    batch = make_decode_batch(
        rng(11, n, b, k, i),
        batch=b,
        k=k,
        width=n,
        row_stride=padded_stride(n),
        family=family,
        lengths="full" if i % 3 else "ragged",
    )
    kv = torch.from_numpy(batch.kv_lens).cuda()
    run_and_check(kp, batch, "decode", kv, None, k, det, values)


@pytest.mark.parametrize("family", TAIL_FAMILIES)
@pytest.mark.parametrize("n, rows", [(32768, 16), (131072, 8), (262144, 4)])
def test_tail_prefill(kp, n, rows, family):
    i = TAIL_FAMILIES.index(family)
    k = K_ALL[(i + n // 32768) % 3]
    batch = make_prefill_batch(
        rng(12, n, i),
        rows=rows,
        k=k,
        width=n,
        row_stride=padded_stride(n),
        family=family,
        misaligned=True,
        lengths="full",
    )
    s = torch.from_numpy(batch.row_starts).cuda()
    e = torch.from_numpy(batch.row_ends).cuda()
    run_and_check(kp, batch, "prefill", s, e, k, det=bool(i % 2), values=True)


def test_zz_tie_path_everywhere():
    """Every routed family shape took the tie path on these rows; at least 10,000 rows were
    checked."""
    if ROWS_CHECKED["n"] == 0:
        pytest.skip("no device tests ran")
    print(f"\nrows checked against the oracle: {ROWS_CHECKED['n']} (seed {helpers.SEED})")
    print("paths:", sorted((f, s, p.name) for f, s, p in PATHS_SEEN))
    for fam, split in (("register", False), ("streaming", False), ("streaming", True)):
        assert (fam, split, Path.TIE) in PATHS_SEEN, (fam, split)
    assert ROWS_CHECKED["n"] >= 10000
