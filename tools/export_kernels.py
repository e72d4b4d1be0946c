"""Export every kernel configuration a device run needs, ahead of time, on any machine.

    CUTE_DSL_ARCH=sm_90a python tools/export_kernels.py --out .aot --set device-tests

Sets:
  routable      every configuration ``route_static`` can choose for the device (every family of
                the registry), in every call mode with and without values and the
                deterministic mode;
  device-tests  ``routable`` plus the path-recording variants the forced-path tests use, and
                the dense-row variants of ``test_dense_rows_match_the_model``;
  register      the register-resident configurations of ``tests/kernels/test_register_gpu.py``,
                ``tools/tune_register.py`` and ``tools/sanitize_register.py``;
  cluster       the cluster-register configurations of ``tests/kernels/test_cluster_gpu.py``
                and ``tools/tune_cluster.py``;
  half          the bfloat16 / float16 configurations: every routable one with its
                path-recording variant (``tests/kernels/test_half_gpu.py``), those of
                ``tests/kernels/test_register_gpu.py``, ``tests/kernels/test_cluster_gpu.py``
                and ``tools/tune_register.py --dtype``.
"""

from __future__ import annotations

import argparse
import logging
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

from gvr_kernels.aot import MANIFEST, manifest_entry
from gvr_kernels.registry import routable_configs


def _one(args):
    cfg, out, arch = args
    from gvr_kernels.aot import export_config

    t = time.time()
    path = export_config(cfg, out, arch)
    return cfg, path.name, time.time() - t


def register_configs() -> list:
    """The register-resident configurations the device tests and the tune table use."""
    from gvr_kernels.register import RegisterConfig

    tests = [(256, 1), (512, 2), (512, 4), (1024, 4), (512, 8), (1024, 8)]
    tune = [(256, 2), (512, 1), (1024, 1), (1024, 2)]
    # the bulk shapes (four 256-thread CTAs per SM, a smaller staging), as the tests build them
    bulk = {(256, 2): (4, 2048), (256, 4): (4, 2048), (256, 8): (4, 4096)}
    out = {}
    for threads, vecs in tests + tune:
        for resident in (1, 2) if threads <= 512 else (1,):
            out[RegisterConfig(threads=threads, vecs=vecs, resident=resident)] = None
    for threads, vecs in tests + list(bulk):
        resident, capacity = bulk.get((threads, vecs), (1, 8192))
        base = RegisterConfig(threads=threads, vecs=vecs, resident=resident, capacity=capacity)
        out[base] = None
        for cfg in (
            replace(base, bracket=False),
            replace(base, record_paths=True),
            replace(base, record_paths=True, capacity=2048),
            replace(base, mode="prefill", with_values=True),
            replace(base, mode="full"),
            replace(base, with_values=True),
            replace(base, with_values=True, deterministic=True),
        ):
            out[cfg] = None
    # the loads before the length (early_loads: tests, and tools/sanitize_register.py)
    for threads, vecs in tests:
        if threads <= 512:
            for base in (
                RegisterConfig(threads=threads, vecs=vecs, early_loads=True),
                RegisterConfig(threads=threads, vecs=vecs, early_loads=True, capacity=2048),
            ):
                out[base] = None
                out[replace(base, bracket=False)] = None
                out[replace(base, record_paths=True)] = None
                out[replace(base, record_paths=True, bracket=False)] = None
                out[replace(base, with_values=True, deterministic=True)] = None
    # the bracket emission's bit walk (test_forced_paths_with_bit_walk)
    for threads, vecs in ((512, 4), (1024, 8)):
        out[RegisterConfig(threads=threads, vecs=vecs, capacity=2048, record_paths=True,
                           bit_walk=True)] = None  # fmt: skip
    # tools/sanitize_register.py: the bracket paths past a small staging, the bulk shapes.
    small = RegisterConfig(threads=512, vecs=4, capacity=2048)
    out[small] = None
    out[replace(small, with_values=True, deterministic=True)] = None
    for (threads, vecs), (resident, capacity) in bulk.items():
        base = RegisterConfig(threads=threads, vecs=vecs, resident=resident, capacity=capacity)
        out[replace(base, mode="prefill", with_values=True)] = None
        out[replace(base, with_values=True, deterministic=True)] = None
    # tools/sanitize_register.py: the routed 512 x 8 bracket row with the bit walk
    for early in (False, True):
        out[RegisterConfig(threads=512, vecs=8, bit_walk=True, early_loads=early)] = None
    return list(out)


def dense_configs() -> list:
    """The dense-row configurations (``dense_min = 2``) of the streaming and register
    ``test_dense_rows_match_the_model`` tests: the streaming routes of K = 2048 at 131,076
    scores on one CTA a row, a static split and a ragged split (the tests' row counts), the
    cluster split of eight CTAs a row over 32,768 scores, and the 1024 x 8 / 512 x 4 register
    shapes without the bracket, recording paths and writing
    values."""
    from gvr_kernels.register import RegisterConfig
    from gvr_kernels.routing import RAGGED_BULK_MAX_ROWS, cluster_split_route, route_static
    from gvr_kernels.spec import H200

    out = {}
    for rows in (RAGGED_BULK_MAX_ROWS + 88, 24, 140):
        cfg = route_static(H200, rows=rows, n_env=131076, k=2048).config
        out[replace(cfg, dense_min=2, record_paths=True)] = None
    cfg = cluster_split_route(H200, rows=12, n_env=32768, k=2048, cluster=8).config
    out[replace(cfg, dense_min=2, record_paths=True)] = None
    for threads, vecs in ((1024, 8), (512, 4)):
        base = RegisterConfig(threads=threads, vecs=vecs, bracket=False, dense_min=2)
        out[replace(base, record_paths=True)] = None
        out[replace(base, with_values=True)] = None
    return list(out)


def cluster_configs() -> list:
    """The cluster-register configurations the device tests and the tune table use (each
    shape with and without the bracket path)."""
    from gvr_kernels.cluster import ClusterConfig

    routed = [(4, 512, 4), (8, 512, 4), (4, 1024, 4), (8, 1024, 4)]
    tests = routed + [(2, 1024, 4)]
    out = {}
    for br in (True, False):
        for c, t, v in tests:
            base = ClusterConfig(cluster=c, threads=t, vecs=v, bracket=br)
            variants = [base, replace(base, record_paths=True)]
            if (c, t, v) in routed:
                variants += [
                    replace(base, record_paths=True, capacity=4096),
                    replace(base, with_values=True),
                    replace(base, with_values=True, deterministic=True),
                    replace(base, mode="prefill", with_values=True),
                    replace(base, mode="prefill", with_values=True, deterministic=True),
                    replace(base, mode="full"),
                    replace(base, mode="prefill", record_paths=True),
                ]
                forced = replace(base, capacity=2048, with_values=True, record_paths=True)
                variants += [forced, replace(forced, deterministic=True)]
                if br and (c, t) in ((4, 512), (8, 1024)):  # test_bracket_paths_with_bit_walk
                    walk = replace(forced, bit_walk=True)
                    variants += [walk, replace(walk, with_values=False)]
            for cfg in variants:
                out[cfg] = None
    # The non-portable 16-CTA shapes (not routed yet): the tune table and their device test.
    for c, t, v in ((16, 512, 4), (16, 1024, 4)):
        for br in (True, False):
            out[ClusterConfig(cluster=c, threads=t, vecs=v, bracket=br)] = None
        forced = ClusterConfig(
            cluster=c, threads=t, vecs=v, bracket=True, capacity=2048, record_paths=True
        )
        out[forced] = None
        out[replace(forced, mode="full", deterministic=True, record_paths=False)] = None
    return list(out)


def half_configs() -> list:
    """The 16-bit configurations of the device suites and the register tune table, the
    forced-path ones first, then the routed ones' path-recording variants, then the routed
    ones."""
    from gvr_kernels.cluster import ClusterConfig
    from gvr_kernels.register import RegisterConfig

    out = {}
    for dtype in ("bfloat16", "float16"):
        for threads, vecs, br in ((512, 2, True), (1024, 4, True), (1024, 2, False)):
            out[RegisterConfig(threads=threads, vecs=vecs, capacity=2048, dtype=dtype,
                               bracket=br, record_paths=True)] = None  # fmt: skip
        for threads, vecs in ((512, 1), (512, 2), (1024, 2), (1024, 4)):  # the bracket tests
            base = RegisterConfig(threads=threads, vecs=vecs, dtype=dtype)
            out[replace(base, record_paths=True)] = None
            out[replace(base, with_values=True)] = None
            out[replace(base, with_values=True, deterministic=True)] = None
        for c, t, br in ((4, 512, True), (8, 512, True), (4, 1024, False), (16, 512, True)):
            base = ClusterConfig(cluster=c, threads=t, vecs=2, bracket=br, dtype=dtype)
            out[replace(base, record_paths=True)] = None
            if br:
                forced = replace(base, capacity=2048, with_values=True, record_paths=True)
                out[replace(forced, deterministic=dtype == "float16")] = None
    # the bit walk's 16-bit cases (test_forced_paths_with_bit_walk, ..._bracket_paths_...)
    out[RegisterConfig(threads=1024, vecs=4, capacity=2048, dtype="bfloat16", record_paths=True,
                       bit_walk=True)] = None  # fmt: skip
    walk = ClusterConfig(cluster=4, threads=512, vecs=2, bracket=True, dtype="bfloat16",
                         capacity=2048, record_paths=True, bit_walk=True)  # fmt: skip
    out[walk] = None
    out[replace(walk, with_values=True)] = None
    routed = [c for c in routable_configs() if c.dtype != "float32"]
    for cfg in routed:
        base = replace(cfg, mode="decode", with_values=False, deterministic=False)
        out[replace(base, record_paths=True)] = None
    for cfg in routed:
        out[cfg] = None
    for dtype in ("bfloat16", "float16"):  # the tune table
        for threads, vecs in ((256, 1), (512, 1), (512, 2), (1024, 1), (1024, 2), (1024, 4)):
            for resident in (1, 2) if threads <= 512 else (1,):
                out[RegisterConfig(threads=threads, vecs=vecs, resident=resident, dtype=dtype)] = (
                    None
                )
    return list(out)


def export_all(
    configs, out: str, arch: str = "sm_90a", jobs: int = 2, log: bool = False, merge: bool = False
):
    """Export ``configs`` into ``out`` (``jobs`` processes, in the given order) and write its
    manifest, rewritten after every kernel so that an interrupted export leaves a usable
    library of the kernels done; ``merge``: the manifest keeps the kernels ``out`` already
    holds. Returns ``out``. The tune tools call this before CUDA is initialised (the pool
    forks)."""
    import json
    from pathlib import Path

    manifest = {}
    if merge and Path(out, MANIFEST).exists():
        manifest = json.loads(Path(out, MANIFEST).read_text())
    with ProcessPoolExecutor(jobs) as pool:
        for cfg, name, dt in pool.map(_one, [(c, out, arch) for c in configs]):
            manifest[cfg.name] = manifest_entry(cfg, name, arch)
            tmp = Path(out, MANIFEST + ".tmp")
            tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True))
            tmp.replace(Path(out, MANIFEST))
            if log:
                print(f"{dt:5.1f}s {cfg.name}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument(
        "--set",
        default="device-tests",
        choices=("routable", "device-tests", "register", "cluster", "half"),
    )
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument(
        "--match", default="", help="only names holding each of these, none of the !ones (a,!b)"
    )
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO)
    sets = {"register": register_configs, "cluster": cluster_configs, "half": half_configs}
    configs = sets[args.set]() if args.set in sets else list(routable_configs())
    if args.set == "device-tests":
        bases = {replace(c, mode="decode", with_values=False, deterministic=False) for c in configs}
        configs += [replace(c, record_paths=True) for c in bases] + dense_configs()
    parts = [p for p in args.match.split(",") if p]
    configs = [
        c
        for c in configs
        if all((p[1:] not in c.name) if p[0] == "!" else (p in c.name) for p in parts)
    ]
    # (a folder that holds an export keeps it: several sets can share one folder)
    export_all(configs, args.out, args.arch, args.jobs, log=True, merge=True)
    print(f"exported {len(dict.fromkeys(configs))} kernels to {args.out}")


if __name__ == "__main__":
    main()
