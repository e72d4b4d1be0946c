"""Device tests of block-skip (``StreamingConfig.block_skip``; ``pytest -m gpu`` on an H200):
the streaming kernel reading the producer's block maxima (``KernelArgs.block_max``).

Every answer is checked by the CPU oracle, and every recorded path is the CPU model's: the
ladder path of ``gvr_reference.model`` with the ``SKIPPED`` bit where
``gvr_reference.blockskip.kernel_skips`` says the row's first pass skips blocks. Maxima come
from the torch producer beside the indexer (``gvr_integration.indexer.block_maxima``, over the
whole physical row: the poison past each length included), or are loosened (every bound
raised, or ``+inf``): the answer must not change, only the blocks read. Rows: every value
family and the locality rows block-skip is for (``sink_window``), decode rows with
``next_n`` / ``compress_ratio``, prefill windows at every start modulo the vector, dense rows,
values and deterministic ties, float32 and 16-bit logits, one and several CTAs per row.
"""

from __future__ import annotations

from dataclasses import replace

import kernel_helpers as helpers
import numpy as np
import pytest
from gvr_kernels.routing import BLOCK_SKIP_MIN_BYTES, route_static
from gvr_reference.blockskip import BLOCK, SKIPPED, kernel_skips
from gvr_reference.model import ModelConfig, simulate_row
from gvr_reference.workloads import make_decode_batch, make_dense_batch, make_prefill_batch
from kernel_helpers import FAMILIES, rng

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

ROWS_CHECKED = {"n": 0}
SKIPS_SEEN = {True: 0, False: 0}


def maxima(logits, loosen=None, windows=None):
    """The producer's block maxima of a device logits view (float32 ``[rows, ceil(width /
    32)]``): ``loosen="up"`` adds a random positive amount to each, ``"inf"`` makes every one
    ``+inf`` (both still bounds); ``windows`` (a ``RowWindows``): maxima of the scores inside
    each row's window only (the least the contract allows: columns outside count as
    ``-inf``)."""
    from gvr_integration.indexer import block_maxima

    x = logits.float()
    if windows is not None:
        cols = torch.arange(x.shape[1], device=x.device)[None, :]
        s = torch.from_numpy(windows.starts).to(x.device)[:, None]
        e = s + torch.from_numpy(windows.lengths).to(x.device)[:, None]
        x = torch.where((cols >= s) & (cols < e), x, -float("inf"))
    bm = block_maxima(x, BLOCK)
    if loosen == "up":
        bm = bm + torch.rand_like(bm) * 4
    elif loosen == "inf":
        bm = torch.full_like(bm, float("inf"))
    return bm.contiguous()


def skip_route(rows, width, k, mode, dtype="float32", parts=None):
    """The streaming route of the launch with block skip forced on (whatever the working set
    gate says), or with ``parts`` CTAs per row. Routed as a launch with values (the launch
    replaces the flags), so none of the lean decode variants the router never gives a
    block-skip launch (the cluster split, its prefetch, the low aim, dense rows); more rows
    than SMs run one 512-thread CTA a row, as a launch passing maxima does (the router keeps
    block-skip launches off the ragged split of many rows)."""
    spec = helpers_spec()
    r = route_static(
        spec, rows=rows, n_env=width, k=k, mode=mode, dtype=dtype, with_values=True,
        families=("streaming",),
    )  # fmt: skip
    cfg = replace(r.config, block_skip=True, l2_hints=False, preload=0)
    if cfg.ragged and rows > spec.sm_count:
        cfg = replace(cfg, split=False, ragged=False)
        r = replace(r, parts=1, grid=rows, workspace_words=0)
    if parts is not None and parts != r.parts:
        from gvr_kernels.routing import _SPLIT

        cfg = replace(
            _SPLIT, mode=mode, dtype=dtype, block_skip=True, unroll=cfg.unroll,
            with_values=cfg.with_values, deterministic=cfg.deterministic,
        )  # fmt: skip
        return replace(
            r, config=cfg, parts=parts, grid=rows * parts,
            workspace_words=rows * cfg.workspace_words_per_row,
        )  # fmt: skip
    return replace(r, config=cfg)


_SPEC = {}


def helpers_spec():
    if "spec" not in _SPEC:
        from gvr_kernels.spec import spec_from_properties

        _SPEC["spec"] = spec_from_properties(torch.cuda.get_device_properties(0))
    return _SPEC["spec"]


def upload(batch):
    return helpers.device_scores(batch.arena, getattr(batch, "dtype", "float32"))[:, : batch.width]


def run_and_check(kp, batch, mode, a, b, k, route, *, loosen=None, next_n=1, cr=1,
                  values=False, det=False):  # fmt: skip
    """One launch recording paths (each the model's), one with ``values`` / ``det``; both
    answers checked by the oracle."""
    logits = upload(batch)
    bm = maxima(logits, loosen, batch.windows if loosen == "window" else None)
    out, _, paths, route = kp.launch(
        mode, logits, a, b, k, paths=True, next_n=next_n, cr=cr, route=route, block_max=bm
    )
    helpers.check(ROWS_CHECKED, batch, out)
    cfg = route.config
    assert cfg.block_skip, cfg.name
    vec = cfg.key_format.vec
    mcfg = ModelConfig(route.ladder, parts=route.parts, dtype=cfg.dtype)
    w = batch.windows
    got = paths.cpu().numpy()
    if not cfg.ragged:
        want = []
        for r in range(batch.rows):
            s, n = int(w.starts[r]), int(w.lengths[r])
            v = batch.logits[r, s : s + n]
            code = int(simulate_row(v, k, mcfg, lead=s % vec).path)
            skips = kernel_skips(v, k, mcfg, lead=s % vec)
            SKIPS_SEEN[bool(skips)] += 1
            want.append(code | (SKIPPED if skips else 0))
        want = np.array(want)
        bad = got != want
        assert np.array_equal(got, want), (cfg.name, np.flatnonzero(bad)[:8], got[bad][:8],
                                           want[bad][:8])  # fmt: skip
    if values or det:
        out, val, _, _ = kp.launch(
            mode, logits, a, b, k, values=values, det=det, next_n=next_n, cr=cr, route=route,
            block_max=bm,
        )  # fmt: skip
        v = None if val is None else helpers.widened(val)
        helpers.check(ROWS_CHECKED, batch, out, v, det=det)


@pytest.mark.parametrize("family", ("sink_window",) + FAMILIES)
@pytest.mark.parametrize("k", [512, 2048])
def test_families_exact_with_correct_maxima(kp, family, k):
    """Every value family: decode rows of ragged length on one CTA a row (512 threads, more
    rows than SMs: the large-batch core) and whole rows split over CTAs."""
    for j, (b, width, lengths, parts) in enumerate(
        ((160, 70000, "ragged", None), (3, 262144, "full", 8))
    ):
        batch = make_decode_batch(
            rng(41, k, j, FAMILIES.index(family) if family in FAMILIES else 99), batch=b, k=k,
            width=width, row_stride=helpers.padded_stride(width) + 4 * j, family=family,
            lengths=lengths,
        )  # fmt: skip
        kv = torch.from_numpy(batch.kv_lens).cuda()
        route = skip_route(b, width, k, "decode", parts=parts)
        run_and_check(kp, batch, "decode", kv, None, k, route, values=j == 0, det=j == 1)


LOOSE_FAMILIES = ["sink_window", "gaussian", "nan", "tie_flood"]


@pytest.mark.parametrize("loosen", ["up", "inf", "window"])
@pytest.mark.parametrize("family", LOOSE_FAMILIES)
def test_loose_maxima_change_nothing_but_reads(kp, family, loosen):
    batch = make_decode_batch(
        rng(43, LOOSE_FAMILIES.index(family), len(loosen)), batch=64, k=1024, width=100003,
        family=family, row_stride=helpers.padded_stride(100003), lengths="ragged",
    )  # fmt: skip
    kv = torch.from_numpy(batch.kv_lens).cuda()
    run_and_check(kp, batch, "decode", kv, None, 1024, skip_route(64, 100003, 1024, "decode"),
                  loosen=loosen)  # fmt: skip


@pytest.mark.parametrize("k", [512, 2048])
def test_decode_mtp_compressed_and_the_1024_thread_core(kp, k):
    batch = make_decode_batch(
        rng(44, k), batch=40, next_n=2, compress_ratio=4, k=k, width=65537,
        row_stride=helpers.padded_stride(65537) + 4, family="sink_window", lengths="ragged",
    )  # fmt: skip
    kv = torch.from_numpy(batch.kv_lens).cuda()
    route = skip_route(80, 65537, k, "decode")
    assert route.config.threads == 1024
    run_and_check(kp, batch, "decode", kv, None, k, route, next_n=2, cr=4, values=True)


@pytest.mark.parametrize("family", ["sink_window", "dsa_like", "signed_zero"])
def test_prefill_windows_at_every_alignment(kp, family):
    """Windows start at every column modulo the vector and the block: partial blocks at both
    ends of a window, misaligned first vector."""
    batch = make_prefill_batch(
        rng(45, len(family)), rows=200, k=512, width=90001, family=family,
        row_stride=helpers.padded_stride(90001),
    )  # fmt: skip
    s = torch.from_numpy(batch.row_starts).cuda()
    e = torch.from_numpy(batch.row_ends).cuda()
    assert len({int(x) % BLOCK for x in batch.row_starts}) > 8
    route = skip_route(200, 90001, 512, "prefill")
    run_and_check(kp, batch, "prefill", s, e, 512, route, values=True, det=True)
    # bounds that hold only inside each window (partial blocks at both ends)
    run_and_check(kp, batch, "prefill", s, e, 512, route, loosen="window")


def test_dense_rows_and_ragged_split(kp):
    batch = make_dense_batch(rng(46), rows=140, k=2048, width=65536, family="sink_window")
    run_and_check(kp, batch, "full", None, None, 2048, skip_route(140, 65536, 2048, "full"))
    batch = make_decode_batch(
        rng(47), batch=48, k=512, width=262144, family="sink_window", lengths="ragged",
        row_stride=262144,
    )  # fmt: skip
    kv = torch.from_numpy(batch.kv_lens).cuda()
    route = route_static(helpers_spec(), rows=48, n_env=262144, k=512, block_skip=True)
    route = replace(route, config=replace(route.config, block_skip=True))
    assert route.config.ragged, route.config.name
    run_and_check(kp, batch, "decode", kv, None, 512, route)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("family", ["sink_window", "gaussian", "nan", "levels16"])
def test_16bit_logits(kp, dtype, family):
    batch = make_decode_batch(
        rng(48, len(dtype), len(family)), batch=150, k=2048, width=131072, family=family,
        row_stride=131072 + 8, lengths="ragged", dtype=dtype,
    )  # fmt: skip
    kv = torch.from_numpy(batch.kv_lens).cuda()
    route = skip_route(150, 131072, 2048, "decode", dtype=dtype)
    run_and_check(kp, batch, "decode", kv, None, 2048, route, values=True)


def test_routed_large_batch_takes_block_skip(kp):
    """A launch of at least ``BLOCK_SKIP_MIN_BYTES`` with maxima routes to block skip; the
    answer is exact and most locality rows skip."""
    b, width, k = 512, 65536, 2048
    assert b * width * 4 >= BLOCK_SKIP_MIN_BYTES
    batch = make_decode_batch(
        rng(49), batch=b, k=k, width=width, family="sink_window", lengths="full", poison=False
    )
    kv = torch.from_numpy(batch.kv_lens).cuda()
    logits = upload(batch)
    out, _, paths, route = kp.launch(
        "decode", logits, kv, None, k, paths=True, block_max=maxima(logits)
    )
    assert route.config.block_skip, route.config.name
    helpers.check(ROWS_CHECKED, batch, out)
    assert ((paths.cpu().numpy() & SKIPPED) != 0).mean() > 0.9


def test_zz_summary():
    print(f"\nblock-skip rows checked: {ROWS_CHECKED['n']}; model rows skipping / not: "
          f"{SKIPS_SEEN[True]} / {SKIPS_SEEN[False]}")  # fmt: skip
    assert SKIPS_SEEN[True] > 0 and SKIPS_SEEN[False] > 0
