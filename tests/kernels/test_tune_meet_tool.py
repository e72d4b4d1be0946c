"""``tools/tune_meet.py`` times each cell's routed launch against its alternatives (CPU: the
variants it builds)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[2] / "tools"))

from gvr_kernels import routing  # noqa: E402
from gvr_kernels.spec import H200  # noqa: E402
from tune_meet import CELLS, variants  # noqa: E402


def test_meet_pairs_the_route_with_the_workspace_split():
    keep = routing._split_cluster
    clustered = 0
    for rows, n, k, _kind in CELLS["meet"]:
        got = variants("meet", rows, n, k)
        assert routing._split_cluster is keep  # (restored)
        label, routed, parts = got[0]
        assert label == "routed" and parts >= 1
        if len(got) == 1:
            # already the workspace split
            assert routed.family == "streaming" and routed.split and not routed.cluster
            continue
        ((label, ws, ws_parts),) = got[1:]
        assert label == "wsplit" and ws.family == "streaming" and ws.split and not ws.cluster
        assert ws_parts == routing._static_parts(H200, rows, n) > 1
        clustered += routed.family == "cluster" or bool(getattr(routed, "cluster", 0))
    # the cells the cluster split or the cluster family still serve are among them
    assert clustered >= 6


def test_alt_and_aim_variants_differ_from_the_route():
    keep = (routing.RAGGED_MIN_N, routing.RAGGED_BULK_MIN_N)
    labels = set()
    for which in ("alt", "aim"):
        for rows, n, k, _kind in CELLS[which]:
            got = variants(which, rows, n, k)
            assert got[0][0] == "routed"
            keys = [(cfg, parts) for _, cfg, parts in got]
            assert len(keys) == len(set(keys))  # (each variant a launch of its own)
            labels |= {label for label, _, _ in got}
            if which == "aim":
                assert {cfg.aim_mult for _, cfg, _ in got} == {2, 3, 4}
    assert (routing.RAGGED_MIN_N, routing.RAGGED_BULK_MIN_N) == keep
    assert labels == {"routed", "wsplit", "rsplit", "bulk", "a2", "a3", "a4"}


def test_parts_many_fill_and_rows2_variants():
    """Each set's variants are launches of their own, built with the named routing constants
    patched and then restored: more CTAs a split row (``parts``), the pair of cluster CTAs or
    bulk prefetch (``many``), clusters over every SM (``fill``), the ragged split of up to two
    rows per SM (``rows2``)."""
    names = ("MIN_PART_ELEMS", "CLUSTER_SM_SHARE", "SMALL_CLUSTER_SM_SHARE", "RAGGED_BULK_MIN_N")
    keep = {name: getattr(routing, name) for name in names}
    seen = {}
    for which in ("parts", "many", "fill", "rows2"):
        for rows, n, k, _kind in CELLS[which]:
            got = variants(which, rows, n, k)
            assert got[0][0] == "routed"
            keys = [(cfg, parts) for _, cfg, parts in got]
            assert len(keys) == len(set(keys))
            for label, cfg, parts in got[1:]:
                seen.setdefault(which, set()).add(label)
                if label in ("p4096", "p2048"):
                    assert cfg.split and parts > got[0][2]
                if label.startswith("pf"):
                    assert cfg.prefetch == int(label[2:])
                if label == "all":
                    assert cfg.family == "cluster"
                if label.startswith("bulk"):
                    assert cfg.ragged and parts == min(rows - 1, H200.sm_count)
    assert {name: getattr(routing, name) for name in names} == keep
    assert seen["parts"] >= {"p4096", "p2048"} and seen["many"] >= {"x2", "pf1", "pf4"}
    assert seen["fill"] == {"all"} and seen["rows2"] >= {"pf1", "bulk", "bulk_pf1"}


def test_bracket_variants_time_both_paths_of_register_rows():
    """The ``bracket`` set's register cells (K above a quarter of the envelope) add the same
    launch on the other path: the bracket histogram with the bit walk where the router keeps
    the radix selection over the registers (fewer than ``BRACKET_WIDE_K_VECS`` vectors a
    thread), the radix selection where it takes the bracket; cells routed elsewhere have no
    variant."""
    from gvr_kernels.routing import BRACKET_WIDE_K_VECS

    seen = {"br": 0, "radix": 0}
    for rows, n, k, _kind in CELLS["bracket"]:
        got = variants("bracket", rows, n, k)
        label, routed, parts = got[0]
        assert label == "routed" and parts == 1
        if routed.family != "register":
            assert len(got) == 1
            continue
        assert 4 * k > n
        assert routed.bracket == (routed.vecs >= BRACKET_WIDE_K_VECS), routed.name
        ((label, other, other_parts),) = got[1:]
        assert other_parts == 1
        if routed.bracket:
            assert label == "radix"
            assert other == replace(routed, bracket=False, bit_walk=False)
        else:
            assert label == "br"
            assert other == replace(routed, bracket=True, bit_walk=True)
        seen[label] += 1
    assert seen["br"] >= 10 and seen["radix"] >= 2
