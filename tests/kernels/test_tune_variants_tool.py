"""``tools/tune_variants.py`` times the routed launch beside its variants (CPU: the variants)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from gvr_kernels.spec import H200

sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))

from tune_variants import (  # noqa: E402
    BANDS,
    CLUSTER_SPLIT_DENSE,
    CLUSTER_SPLIT_SIZES,
    DENSE,
    PASS,
    batch_kind,
    summary,
    variants,
)


def test_variants_are_the_routed_launch_and_its_dense_copies():
    # (a route with its own dense rows times the plain launch, d0, in place of them)
    for width, rows, k in [(32768, 17, 2048), (131072, 16, 2048), (262144, 256, 1024)]:
        got = variants(H200, rows, width, k)[: 1 + len(DENSE)]
        routed = got[0][1]
        own = routed.dense_min
        dense = [0 if d == own else d for d in DENSE]
        assert [label for label, _, _ in got] == ["routed"] + [f"d{d}" for d in dense]
        plain = replace(routed, dense_min=0)
        for (_, cfg, parts), d in zip(got[1:], dense, strict=True):
            assert cfg.dense_min == d and parts == got[0][2]
            assert cfg == replace(plain, dense_min=d)
    # a route with dense rows (the cluster split) times the plain launch in place of its own
    got = variants(H200, 8, 262144, 2048)
    assert got[0][1].cluster == 8 and got[0][1].dense_min == 2
    assert [label for label, _, _ in got][: 1 + len(DENSE)] == ["routed", "d0", "d3", "d4"]
    assert got[1][1].dense_min == 0 and got[1][1].name == got[0][1].name.replace("_d2", "")


def test_bracket_routes_get_the_bit_walk():
    """Register and cluster routes with the bracket path (routed with the bit walk) add its
    predicated form, after the dense variants where the family has them; a cell with no
    variant is left out."""
    cluster = variants(H200, 1, 32768, 1024)
    assert [label for label, _, _ in cluster] == ["routed", "nowalk"]
    assert cluster[0][1].family == "cluster" and cluster[0][1].bit_walk
    assert not cluster[1][1].bit_walk
    register = variants(H200, 1, 4096, 512)
    assert register[0][1].family == "register" and register[0][1].bracket
    assert [label for label, _, _ in register] == ["routed"] + [f"d{d}" for d in DENSE] + ["nowalk"]
    assert register[-1][1].name + "_walk" == register[0][1].name
    # a cluster route without the bracket path has no variant
    assert variants(H200, 16, 65536, 512) == []


def test_bands_lie_past_two_k():
    assert all(n > 2 * k for _, _, k, n in BANDS)


def test_k_2048_cells_also_run_the_cluster_split():
    """K = 2048 over 32,768 scores at 17 rows (past four cluster CTAs a row on half the SMs)
    is routed to the register family, over 131,072 at 16 rows to the workspace split; the
    tool adds the cluster split of every size whose CTAs fit the SMs, plain and with dense
    rows, at the same envelope."""
    for rows, width in [(17, 32768), (16, 131072), (31, 65536)]:
        got = variants(H200, rows, width, 2048)
        routed = got[0][1]
        assert routed.family == "register" or (routed.split and not routed.cluster)
        sizes = [c for c in CLUSTER_SPLIT_SIZES if rows * c <= H200.sm_count]
        want = [f"x{c}" + (f"d{d}" if d else "") for c in sizes for d in CLUSTER_SPLIT_DENSE]
        split = [v for v in got if v[0].startswith("x")]
        assert [label for label, _, _ in split] == want
        for label, cfg, parts in split:
            c = int(label[1:].split("d")[0])
            assert cfg.family == "streaming" and cfg.cluster == c and parts == c
            assert cfg.dense_min == (2 if "d" in label else 0)
    # the workspace split at any K gets them too
    labels = [label for label, _, _ in variants(H200, 16, 131072, 512)]
    assert labels[1 + len(DENSE) + len(PASS) :] == [
        "x2",
        "x2d2",
        "x4",
        "x4d2",
        "x8",
        "x8d2",
    ]
    # the register family at K <= 1024 (its bit walk aside), and launches already on a
    # cluster split, run no cluster split
    register = [label for label, _, _ in variants(H200, 128, 16384, 1024)]
    assert register == ["routed"] + [f"d{d}" for d in DENSE] + ["nowalk"]
    on_split = variants(H200, 8, 262144, 2048)
    assert on_split[0][1].cluster == 8
    assert not any(label.startswith("x") for label, _, _ in on_split)
    # (its pass variants but pf1, the route's own L2 prefetch)
    assert len(on_split) == 1 + len(DENSE) + len(PASS) - 1
    # (a pass variant equal to the routed launch is left out)
    got = variants(H200, 64, 65536, 2048)  # (on the pair of CTAs: no cluster split variants)
    routed = got[0][1]
    same = [
        p for p in PASS if replace(routed, prefetch=p[1], unroll=p[2] or routed.unroll) == routed
    ]
    assert len(got) == 1 + len(DENSE) + len(PASS) - len(same)
    # a cluster of 8 that would pass the SMs is left out
    assert "x8" not in [label for label, _, _ in variants(H200, 20, 32768, 2048)]


def test_summary_groups_cells_by_batch_and_variant():
    assert [batch_kind(k, 32768) for k in (4097, 32768, None, "stdlib")] == [
        "band",
        "full",
        "ragged",
        "real",
    ]
    text = summary({("band", "routed"): [1.0], ("band", "d2"): [0.5, 2.0], ("real", "x8"): [0.9]})
    assert text.splitlines()[1:] == [
        "band   d2     1.000x (0.50-2.00, 2)",
        "real   x8     0.900x (0.90-0.90, 1)",
    ]


def test_streaming_routes_get_the_pass_variants():
    """A streaming route adds its pass with an L2 prefetch, eight vectors a tile, and both
    (after its dense variants); ``groups`` keeps only the groups asked for."""
    got = variants(H200, 256, 65536, 2048)
    routed = got[0][1]
    assert routed.family == "streaming" and not routed.prefetch and routed.unroll == 4
    dense = [f"d{0 if d == routed.dense_min else d}" for d in DENSE]
    labels = [label for label, _, _ in got]
    assert labels == ["routed"] + dense + [label for label, _, _ in PASS]
    for (label, depth, unroll), (got_label, cfg, parts) in zip(PASS, got[4:], strict=True):
        assert got_label == label and parts == got[0][2]
        assert cfg == replace(routed, prefetch=depth, unroll=unroll or routed.unroll)
    only = variants(H200, 256, 65536, 2048, ("pass",))
    assert [label for label, _, _ in only] == ["routed"] + [label for label, _, _ in PASS]
    # register routes have no pass variant: with only that group, no variant at all
    assert variants(H200, 1, 4096, 512, ("pass",)) == []
