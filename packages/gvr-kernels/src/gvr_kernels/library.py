"""The set of kernel configurations the router can choose, for compile tests and warmup."""

from __future__ import annotations

from collections.abc import Iterator

from gvr_reference.routing import B200, H200, DeviceSpec, route_static

from .config import MODES, StreamingConfig

__all__ = ["routable_configs", "base_configs"]


def base_configs(spec: DeviceSpec = H200) -> list[dict]:
    """Distinct configuration cores ``route_static`` produces for ``spec`` over all shapes."""
    seen: dict[tuple, dict] = {}
    s = spec.sm_count
    for rows in sorted({1, 2, s // 2, s // 2 + 1, s, s + 1, 4 * s}):
        for n_env in (4096, 16383, 16384, 262144):
            for k in (512, 2048):
                cfg = route_static(spec, rows=rows, n_env=n_env, k=k).config
                seen.setdefault(tuple(sorted(cfg.items())), cfg)
    return list(seen.values())


def routable_configs(spec: DeviceSpec = H200, modes=MODES) -> Iterator[StreamingConfig]:
    """Every compile configuration a call can route to on ``spec``: each routed core in each
    call mode, with and without values, default and deterministic tie mode."""
    for core in base_configs(spec):
        for mode in modes:
            for with_values in (False, True):
                for deterministic in (False, True):
                    yield StreamingConfig(
                        mode=mode, with_values=with_values, deterministic=deterministic, **core
                    )


#: Specs the compile tests cover.
COMPILE_TARGETS = {"sm_90a": H200, "sm_100a": B200}
