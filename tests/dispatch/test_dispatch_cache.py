"""The compile cache: memory, disk, atomic writes, corrupt entries, locations; and one real
round trip (compile for sm_90a here, load in a fresh process without compiling)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from dispatch_fakes import FakeCompiler
from gvr_dispatch import KernelCache
from gvr_dispatch.cache import default_cache_dir, source_fingerprint
from gvr_kernels.streaming.config import StreamingConfig

CFG = StreamingConfig(mode="full", threads=512, capacity=8192, sample_max=8192)
CFG2 = StreamingConfig(mode="decode", threads=512, capacity=8192, sample_max=8192)


def _cache(tmp_path, compiler=None):
    compiler = compiler or FakeCompiler()
    cache = KernelCache(
        compile_fn=compiler, load_fn=compiler.load, store_fn=compiler.store, cache_dir=tmp_path
    )
    return cache, compiler


def test_memory_then_disk(tmp_path):
    cache, compiler = _cache(tmp_path)
    e1, s1 = cache.get(CFG, "sm_90a")
    e2, s2 = cache.get(CFG, "sm_90a")
    assert (s1, s2) == ("compiled", "memory") and e1 is e2
    assert len(compiler.compiled) == 1
    path = cache.path_for(CFG, "sm_90a")
    assert path.is_file() and path.name == f"{CFG.name}.o"
    assert path.parent.name == cache.fingerprint() and path.parent.parent.name == "sm_90a"
    meta = json.loads((path.parent / "meta.json").read_text())
    assert meta["arch"] == "sm_90a" and meta["fingerprint"] == cache.fingerprint()
    # No temporary files are left behind.
    assert sorted(p.name for p in path.parent.iterdir()) == sorted([path.name, "meta.json"])

    fresh, c2 = _cache(tmp_path)
    c2.fail = True
    e3, s3 = fresh.get(CFG, "sm_90a")
    assert s3 == "disk" and e3.source == "disk" and not c2.compiled
    assert fresh.stats == {"memory": 0, "disk": 1, "compiled": 0}
    # Another arch or config is another entry.
    c2.fail = False
    assert fresh.get(CFG, "sm_100a")[1] == "compiled"
    assert fresh.get(CFG2, "sm_90a")[1] == "compiled"


def test_corrupt_entry_is_logged_and_recompiled(tmp_path, caplog):
    cache, _ = _cache(tmp_path)
    cache.get(CFG, "sm_90a")
    path = cache.path_for(CFG, "sm_90a")
    path.write_bytes(b"\x7fELF truncated")
    fresh, compiler = _cache(tmp_path)
    with caplog.at_level(logging.WARNING, logger="gvr"):
        entry, source = fresh.get(CFG, "sm_90a")
    assert source == "compiled" and len(compiler.compiled) == 1
    assert any("unloadable" in r.getMessage() for r in caplog.records)
    # The entry was rewritten and loads again.
    again, c3 = _cache(tmp_path)
    c3.fail = True
    assert again.get(CFG, "sm_90a")[1] == "disk"


def test_disabled_disk_cache(tmp_path):
    cache, compiler = _cache(None)
    assert cache.cache_dir is None and cache.path_for(CFG, "sm_90a") is None
    cache.get(CFG, "sm_90a")
    cache.set_cache_dir(tmp_path)
    cache.get(CFG2, "sm_90a")
    assert [p.name for p in tmp_path.rglob("*.o")] == [f"{CFG2.name}.o"]
    cache.set_cache_dir(None)
    cache.clear_memory()
    cache.get(CFG2, "sm_90a")
    assert len(compiler.compiled) == 3


def test_unwritable_cache_dir_does_not_fail(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    cache, compiler = _cache(blocker)
    with caplog.at_level(logging.WARNING, logger="gvr"):
        entry, source = cache.get(CFG, "sm_90a")
    assert source == "compiled" and entry.fn is not None
    assert any("could not store" in r.getMessage() for r in caplog.records)


def test_cache_location_from_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("GVR_CACHE_DISABLE", raising=False)
    monkeypatch.setenv("GVR_CACHE_DIR", str(tmp_path / "here"))
    assert default_cache_dir() == tmp_path / "here"
    assert KernelCache().cache_dir == tmp_path / "here"
    monkeypatch.setenv("GVR_CACHE_DISABLE", "1")
    assert default_cache_dir() is None and KernelCache().cache_dir is None
    monkeypatch.delenv("GVR_CACHE_DISABLE")
    monkeypatch.delenv("GVR_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / ".cache" / "gvr"
    with pytest.raises(TypeError, match="cache_dir"):
        KernelCache(cache_dir=3)


def test_fingerprint_is_stable_and_versioned(monkeypatch):
    a = source_fingerprint()
    assert a == source_fingerprint() and len(a) == 24
    import gvr_dispatch.cache as cache_mod

    real = cache_mod._version
    monkeypatch.setattr(cache_mod, "_version", lambda d: "0.0" if "cutlass" in d else real(d))
    assert source_fingerprint() != a


def test_fingerprint_follows_every_kernel_source(tmp_path):
    """The fingerprint hashes every project file that shapes a compiled kernel (the registry's
    family modules plus what they import): editing a copy of any one of them changes it, and
    tooling files are not part of it."""
    import shutil

    from gvr_kernels.registry import kernel_source_files, package_roots

    roots = {}
    for name, root in package_roots().items():
        roots[name] = tmp_path / name
        shutil.copytree(root, roots[name], ignore=shutil.ignore_patterns("__pycache__"))
    files = kernel_source_files(roots)
    rel = {f"{p.parent.name}/{p.name}" for p in files}
    for must in (
        "streaming/kernel.py",
        "streaming/config.py",
        "device/select.py",
        "device/sampling.py",
        "device/keys.py",
        "gvr_kernels/abi.py",
        "gvr_kernels/compile.py",
        "gvr_reference/model.py",
        "gvr_reference/ladder.py",
        "gvr_reference/keys.py",
    ):
        assert must in rel, (must, sorted(rel))
    for tooling in ("gvr_kernels/testing.py", "gvr_kernels/audit.py", "gvr_reference/oracle.py"):
        assert tooling not in rel
    base = source_fingerprint(roots)
    assert base == source_fingerprint(roots)
    for path in files:
        original = path.read_bytes()
        path.write_bytes(original + b"\n# edited\n")
        assert source_fingerprint(roots) != base, f"editing {path} left the fingerprint unchanged"
        path.write_bytes(original)
    assert source_fingerprint(roots) == base
    # A file outside the set does not matter.
    (roots["gvr_kernels"] / "testing.py").write_text("# edited")
    assert source_fingerprint(roots) == base


def test_warmup_cache_dir_argument(tmp_path):
    from dispatch_fakes import fake_dispatcher
    from gvr_kernels.spec import H200

    d, _, compiler = fake_dispatcher()
    assert d.cache.cache_dir is None
    d.warmup(
        k=64,
        rows=(300,),
        width=4096,
        modes=("prefill",),
        spec=H200,
        cache_dir=tmp_path,
        progress=False,
    )
    assert d.cache.cache_dir == tmp_path
    assert len(list(tmp_path.rglob("*.o"))) == 1


# ---------------------------------------------------------------------- the real thing
_SECOND_PROCESS = textwrap.dedent(
    """
    import json, sys, time
    import gvr_dispatch.cache as cache_mod
    from gvr_dispatch import Dispatcher, KernelCache
    from gvr_kernels.spec import H200

    def refuse(config, arch):
        raise AssertionError("compiled although the cache was warm: " + config.name)

    cache_mod._compile = refuse
    d = Dispatcher(cache=KernelCache(cache_dir=sys.argv[1]))
    t = time.perf_counter()
    rep = d.warmup(k=512, rows=(300,), width=4096, modes=("prefill",), spec=H200,
                   progress=False)
    seconds = time.perf_counter() - t
    entry = d.cache.lookup(next(iter(d.cache._memory))[0], "sm_90a")
    print(json.dumps({"loaded": rep.loaded, "compiled": rep.compiled, "seconds": seconds,
                      "callable": callable(entry.fn), "stats": d.cache.stats}))
    """
)


def test_real_round_trip_in_a_second_process(tmp_path):
    """Compile one routed configuration for sm_90a here (no GPU needed), store it, then load it
    in a fresh process whose compiler refuses to run."""
    pytest.importorskip("cutlass")
    env = dict(os.environ, CUTE_DSL_ARCH="sm_90a")
    env.pop("GVR_CACHE_DISABLE", None)
    first = subprocess.run(
        [sys.executable, "-c", _FIRST_PROCESS, str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert first.returncode == 0, first.stderr[-3000:]
    info1 = json.loads(first.stdout.strip().splitlines()[-1])
    assert info1["compiled"] and not info1["loaded"]
    objects = list(Path(tmp_path).rglob("*.o"))
    assert [p.name for p in objects] == [f"{info1['compiled'][0]}.o"]

    second = subprocess.run(
        [sys.executable, "-c", _SECOND_PROCESS, str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert second.returncode == 0, second.stderr[-3000:]
    info2 = json.loads(second.stdout.strip().splitlines()[-1])
    assert info2["loaded"] == info1["compiled"] and not info2["compiled"]
    assert info2["callable"] and info2["stats"]["compiled"] == 0
    print(f"\ncompile {info1['seconds']:.2f} s, load from disk {info2['seconds']:.3f} s")


_FIRST_PROCESS = textwrap.dedent(
    """
    import json, sys, time
    from gvr_dispatch import Dispatcher, KernelCache
    from gvr_kernels.spec import H200

    d = Dispatcher(cache=KernelCache(cache_dir=sys.argv[1]))
    t = time.perf_counter()
    rep = d.warmup(k=512, rows=(300,), width=4096, modes=("prefill",), spec=H200,
                   progress=False)
    print(json.dumps({"loaded": rep.loaded, "compiled": rep.compiled,
                      "seconds": time.perf_counter() - t}))
    """
)
