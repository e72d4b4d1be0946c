"""Every configuration the router can choose compiles for sm_90a and sm_100a, with no spills.

The configurations come from the family registry (``gvr_kernels.registry.routable_configs``);
each is compiled from its family's fake arguments on this (GPU-less) machine, exported, and its
embedded cubin read with cuobjdump: registers must fit the intended residency and nothing may
land in local memory or a stack frame. A probe kernel ties each family's declared
shared-memory size to what its allocation code really allocates.

The audit has two tiers. ``nox -s tests`` (CI) compiles every configuration for sm_90a, the
first target (510 compiles, 27 minutes on two cores in a CI run of 32), those only sm_100a's
router chooses included; the sm_100a compiles are marked ``slow`` and run with the rest in
``nox -s audit`` (both targets, about 1,000 compiles), which a change to a kernel or to the
routing runs before it lands. (The float16 and bfloat16 builds of one configuration are both in
CI's tier: their register counts differ by up to 18.)
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict

import pytest

pytest.importorskip("cutlass")

from gvr_kernels.audit import find_cuobjdump  # noqa: E402
from gvr_kernels.registry import COMPILE_TARGETS, family_of, routable_configs  # noqa: E402
from gvr_kernels.streaming import StreamingConfig  # noqa: E402
from shared_probe import MARK, bracket_hist  # noqa: E402

#: The target every configuration is audited for in CI; the others are ``slow``.
FIRST_TARGET = "sm_90a"
#: The configurations each target's router chooses.
ROUTED = {arch: list(routable_configs(spec)) for arch, spec in COMPILE_TARGETS.items()}
#: Every target's configurations for that target, and the first target's tier also holds the
#: ones only another target routes (a device that schedules clusters of at most eight routes
#: the cluster split at one or two rows, where the H200 runs 16-CTA clusters).
CASES = [(cfg, arch) for arch, cfgs in ROUTED.items() for cfg in cfgs]
CASES += [
    (cfg, FIRST_TARGET)
    for cfg in dict.fromkeys(c for cfgs in ROUTED.values() for c in cfgs)
    if cfg not in ROUTED[FIRST_TARGET]
]


def _unrouted() -> list:
    """Configurations no route chooses yet that the device tests and tools launch: the
    cluster splits (``gvr_kernels.routing.cluster_split_route``) of every cluster size, their
    path-recording, value, tie-mode, prefill and 16-bit variants."""
    from dataclasses import replace

    from gvr_kernels.routing import cluster_split_route

    spec = COMPILE_TARGETS[FIRST_TARGET]
    out = {}
    for cluster, n in ((2, 65536), (4, 65536), (8, 262144), (16, 262144)):
        r = cluster_split_route(spec, rows=4, n_env=n, k=2048, cluster=cluster)
        out[r.config] = None
        out[replace(r.config, record_paths=True)] = None
    r = cluster_split_route(spec, rows=4, n_env=60000, k=2048, cluster=2)
    out[replace(r.config, with_values=True, deterministic=True)] = None
    r = cluster_split_route(
        spec, rows=4, n_env=60000, k=2048, cluster=4, mode="prefill", with_values=True
    )
    out[r.config] = None
    out[replace(r.config, deterministic=True)] = None
    r = cluster_split_route(spec, rows=4, n_env=65536, k=512, cluster=4, dtype="bfloat16")
    out[r.config] = None
    return list(out)


UNROUTED = _unrouted()


def _full_audit_only(cfg, arch) -> bool:
    return arch != FIRST_TARGET


AUDIT_PARAMS = [
    pytest.param(
        (cfg, arch),
        id=f"{arch}-{cfg.name}",
        marks=[pytest.mark.slow] if _full_audit_only(cfg, arch) else [],
    )
    for cfg, arch in CASES
] + [
    pytest.param(
        (cfg, arch),
        id=f"{arch}-{cfg.name}",
        marks=[pytest.mark.slow] if _full_audit_only(cfg, arch) else [],
    )
    for arch, spec in COMPILE_TARGETS.items()
    for cfg in UNROUTED
    if family_of(cfg).can_implement(cfg, spec)  # (16-CTA clusters where the device has them)
]


def _audit(case):
    cfg, arch = case
    from gvr_kernels.audit import audit_config

    return [asdict(u) for u in audit_config(cfg, arch)]


@pytest.fixture(scope="module")
def audits(request):
    """The audit of every case this run selected (after ``-m`` / ``-k``), compiled in parallel."""
    if find_cuobjdump() is None:
        pytest.skip("cuobjdump not available (pip install nvidia-cuda-cuobjdump)")
    wanted = [
        item.callspec.params["case"]
        for item in request.session.items
        if getattr(item, "originalname", None) == "test_compiles_without_spills"
    ]
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=os.cpu_count() or 2, mp_context=ctx) as pool:
        return dict(zip(wanted, pool.map(_audit, wanted), strict=True))


def test_router_covers_every_family_and_core():
    names = {cfg.name for cfg in ROUTED[FIRST_TARGET]}
    # Every target routes the same configurations, but the 16-CTA clusters only where the
    # device schedules them (DeviceSpec.max_cluster_size), where its eight-CTA cluster rows
    # of one or two rows take the cluster split of eight instead.
    portable = {n for n in names if "_x16_" not in n}
    assert portable < names
    for arch, spec in COMPILE_TARGETS.items():
        routed = [c.name for c in ROUTED[arch]]
        assert len(routed) == len(set(routed))
        if spec.max_cluster_size >= 16:
            assert set(routed) == names, arch
        else:
            assert portable <= set(routed), arch
            assert all("_split_x8_" in n for n in set(routed) - portable), arch
    assert any(c.split for c, _ in CASES) and any(not c.split for c, _ in CASES)
    assert {family_of(c).name for c, _ in CASES} == {"streaming", "register", "cluster"}


def test_audit_tiers():
    """CI's tier holds every configuration on the first target, those only another target
    routes included (only their compiles for that target are ``slow``)."""
    ci = {cfg for cfg, arch in CASES if not _full_audit_only(cfg, arch)}
    assert ci == {cfg for cfg, arch in CASES if arch == FIRST_TARGET}
    assert {cfg for cfg, _ in CASES} == ci
    assert len(CASES) == len(set(CASES))


@pytest.mark.parametrize("case", AUDIT_PARAMS)
def test_compiles_without_spills(audits, case):
    cfg, arch = case
    usage = audits[case]
    assert len(usage) == 1, usage
    u = usage[0]
    assert u["local"] == 0 and u["stack"] == 0, f"{cfg.name} on {arch} spills: {u}"
    resident = cfg.resident_ctas
    assert u["registers"] * cfg.threads * resident <= 65536, u
    spec = COMPILE_TARGETS[arch]
    assert resident * (cfg.smem_bytes + u["shared"]) <= spec.smem_per_sm
    assert cfg.smem_bytes <= spec.smem_per_block
    assert family_of(cfg).can_implement(cfg, spec)


def test_invalid_configs_are_rejected():
    from gvr_kernels.cluster import ClusterConfig
    from gvr_kernels.register import RegisterConfig

    with pytest.raises(ValueError, match="cluster"):
        ClusterConfig(cluster=32)
    with pytest.raises(ValueError, match="threads"):
        ClusterConfig(threads=256)
    with pytest.raises(ValueError, match="capacity"):
        ClusterConfig(threads=512, capacity=100)
    with pytest.raises(ValueError, match="capacity"):
        ClusterConfig(threads=512, capacity=1024)  # below the largest K
    with pytest.raises(ValueError, match="capacity"):
        RegisterConfig(threads=512, capacity=1024)

    with pytest.raises(ValueError, match="vecs"):
        RegisterConfig(vecs=9)
    with pytest.raises(ValueError, match="resident"):
        RegisterConfig(threads=1024, resident=3)
    with pytest.raises(ValueError, match="capacity"):
        RegisterConfig(capacity=10)
    with pytest.raises(ValueError, match="mode"):
        StreamingConfig(mode="sideways")
    with pytest.raises(ValueError, match="threads"):
        StreamingConfig(threads=300)
    with pytest.raises(ValueError, match="sample_max"):
        StreamingConfig(threads=1024, sample_max=1000)
    with pytest.raises(TypeError, match="prefetch"):
        StreamingConfig(prefetch=True)  # a depth in tiles, not a flag
    with pytest.raises(ValueError, match="stamp_phases"):
        StreamingConfig(stamp_phases=True, record_paths=True)
    with pytest.raises(ValueError, match="stamp_phases"):
        RegisterConfig(stamp_phases=True, record_paths=True)
    with pytest.raises(ValueError, match="prefetch"):
        StreamingConfig(prefetch=9)
    with pytest.raises(ValueError, match="aim_boost"):
        StreamingConfig(aim_boost=0)


def test_declared_shared_memory_is_what_the_kernel_allocates(tmp_path):
    """The route sizes a launch's shared memory from ``config.smem_bytes``; a probe kernel runs
    the family's own allocation code, and the allocator's total (a constant, x 7919 so it is
    unmistakable in the PTX) must equal that figure; where the bracket count needs them, the
    32 words of ``wsum`` must end where its histogram starts (a second constant)."""
    import json
    import subprocess
    import sys
    from dataclasses import asdict

    cfgs = list(dict.fromkeys(c for c, _ in CASES if not c.with_values and not c.deterministic))
    cfgs = [c for c in cfgs if c.mode == "decode"]
    cfgs.append(StreamingConfig(threads=256, capacity=1000, sample_max=1024))
    cfgs += [c for c in UNROUTED if c.mode == "decode" and not c.record_paths]
    fields = [[c.family, asdict(c)] for c in cfgs]
    env = dict(os.environ, CUTE_DSL_ARCH="sm_90a", CUTE_DSL_KEEP="ptx")
    probe = os.path.join(os.path.dirname(__file__), "shared_probe.py")
    res = subprocess.run(
        [sys.executable, probe, json.dumps(fields)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    found = json.loads(res.stdout.strip().splitlines()[-1])
    assert len(found) == len(cfgs)
    for cfg in cfgs:
        # and the bracket count's 32 scratch words directly before its histogram
        gap = [4 * 32 * MARK] if bracket_hist(cfg) else []
        assert found[cfg.name] == [cfg.smem_bytes * MARK, *gap], (cfg.name, found[cfg.name])


def test_one_process_compiles_for_each_requested_arch(tmp_path):
    """``compile_config(cfg, arch)`` builds for ``arch`` even after the DSL was imported and
    used for another target in the same process (the DSL reads ``CUTE_DSL_ARCH`` once), so an
    export or audit made on a CPU machine is for the GPU it names."""
    import subprocess
    import sys

    code = (
        "from gvr_kernels.audit import cubin_arch, embedded_cubins\n"
        "from gvr_kernels.compile import compile_config\n"
        "from gvr_kernels.streaming import StreamingConfig\n"
        "cfg = StreamingConfig(threads=256, capacity=1024, sample_max=2048, dtype='bfloat16')\n"
        "for arch in ('sm_100a', 'sm_90a', 'sm_100a'):\n"
        "    compile_config(cfg, arch).export_to_c('k.o', function_name='k')\n"
        "    print(cubin_arch(embedded_cubins(open('k.o', 'rb').read())[0]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "CUTE_DSL_ARCH"}
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
        timeout=600,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.split() == ["sm_100a", "sm_90a", "sm_100a"]
