"""Bounded first-call autotuning of fla's Triton kernels (fla 0.6.0 on Triton 3.6).

Every fla kernel autotunes on its first call, compiling its configs one after another, which can take minutes
per op. :class:`FlaAutotunePolicy` patches Triton's ``Autotuner`` (before fla is imported) so that (1) the configs
of one tuning are compiled in parallel threads (Triton's AsyncCompileMode) before the autotuner benchmarks them,
keeping fla's full search; (2) each config's benchmark uses ``bench_ms`` (warm-up, rep) instead of Triton's
25/100 ms; (3) optionally only ``max_configs`` configs spread over each list are kept, which can make fla slower
and must then be reported. Only autotuners of kernels defined in ``fla.*`` modules are touched; every tuning is
reported through ``sink``. Shared by the fla comparison, the kernel profile and the scalar-gate benchmark.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


def select_configs(configs: list, max_configs: int, how: str = "spread") -> list:
    """At most ``max_configs`` of ``configs`` (0: all). ``first``: a prefix; ``spread``: evenly spaced indices
    including the first and the last, so every varied dimension (tile, warps, stages) keeps both ends."""
    n = len(configs)
    if max_configs <= 0 or n <= max_configs:
        return list(configs)
    if how == "first":
        return list(configs[:max_configs])
    if how != "spread":
        raise ValueError(f"unknown selection {how!r}")
    if max_configs == 1:
        return [configs[0]]
    idx = sorted({round(i * (n - 1) / (max_configs - 1)) for i in range(max_configs)})
    return [configs[i] for i in idx]


@dataclass
class FlaAutotunePolicy:
    """Bounds the cost of fla's first-call autotuning; see the module docstring. Only autotuners of kernels
    defined in ``fla.*`` modules are touched; everything is recorded through ``sink``."""

    max_configs: int = 0
    select: str = "spread"
    workers: int = 16
    bench_ms: tuple[float, float] = (5.0, 20.0)
    parallel: bool = True
    sink: object = None  # callable(dict) receiving one row per tuning
    phase: str = ""  # label of the task that triggered a tuning
    tuners: list = field(default_factory=list)
    events: list = field(default_factory=list)
    changes: list = field(default_factory=list)
    installed: bool = False

    def describe(self) -> dict:
        return {"max_configs": self.max_configs, "select": self.select, "parallel_precompile": self.parallel,
                "workers": self.workers, "tune_bench_ms": list(self.bench_ms), "changes": list(self.changes)}

    def set_max_configs(self, n: int, reason: str) -> None:
        if n != self.max_configs:
            self.changes.append({"max_configs": n, "was": self.max_configs, "reason": reason, "phase": self.phase})
            self.max_configs = n
            if self.sink:
                self.sink({"kind": "autotune_policy_change", **self.changes[-1]})

    @staticmethod
    def is_fla(tuner) -> bool:
        return getattr(getattr(tuner, "base_fn", None), "__module__", "").startswith("fla.")

    def install(self) -> None:
        """Patch triton.runtime.autotuner.Autotuner (class level: fla's CachedAutotuner inherits it). Must run
        before fla is imported so that every fla autotuner is registered at construction."""
        if self.installed:
            return
        import triton.testing
        from triton.runtime.autotuner import Autotuner

        policy = self
        orig_init, orig_prune, orig_run = Autotuner.__init__, Autotuner.prune_configs, Autotuner.run

        def init(tuner, *a, **k):
            orig_init(tuner, *a, **k)
            if policy.is_fla(tuner):
                policy.tuners.append(tuner)

        def fast_bench(kernel_call, quantiles):
            return triton.testing.do_bench(kernel_call, warmup=policy.bench_ms[0], rep=policy.bench_ms[1],
                                           quantiles=quantiles)

        def prune(tuner, kwargs):
            configs = orig_prune(tuner, kwargs)
            if not policy.is_fla(tuner):
                return configs
            chosen = select_configs(configs, policy.max_configs, policy.select)
            t0 = time.perf_counter()
            err = policy.precompile(tuner, chosen, kwargs) if policy.parallel else None
            tuner._lethe_event = {"declared": len(tuner.configs), "after_fla_prune": len(configs),
                                  "benchmarked": len(chosen), "precompile_s": round(time.perf_counter() - t0, 2),
                                  "precompile_error": err}
            return chosen

        def run(tuner, *args, **kwargs):
            if not policy.is_fla(tuner):
                return orig_run(tuner, *args, **kwargs)
            tuner.__dict__["do_bench"] = fast_bench  # shadows Autotuner's cached_property
            t0 = time.perf_counter()
            out = orig_run(tuner, *args, **kwargs)
            ev = tuner.__dict__.pop("_lethe_event", None)
            if ev is not None:
                fn = tuner.base_fn
                ev.update(kind="autotune", kernel=f"{fn.__module__}.{fn.__name__}", phase=policy.phase,
                          wall_s=round(time.perf_counter() - t0, 2),
                          bench_s=round(getattr(tuner, "bench_time", float("nan")), 2),
                          best=str(getattr(tuner, "best_config", None)), max_configs=policy.max_configs,
                          select=policy.select)
                policy.events.append(ev)
                if policy.sink:
                    policy.sink(ev)
            return out

        Autotuner.__init__, Autotuner.prune_configs, Autotuner.run = init, prune, run
        self._restore = (Autotuner, orig_init, orig_prune, orig_run)
        self.installed = True

    def uninstall(self) -> None:
        if self.installed:
            cls, i, p, r = self._restore
            cls.__init__, cls.prune_configs, cls.run = i, p, r
            self.installed = False

    def precompile(self, tuner, configs, kwargs) -> str | None:
        """Compile every config of this tuning at once in threads (Triton's AsyncCompileMode), so the
        autotuner's sequential benchmark finds each binary already in the JIT cache. Errors are left for the
        benchmark to meet again (it maps OutOfResources / PTXASError to an infinite time, as without us)."""
        try:
            from concurrent.futures import ThreadPoolExecutor

            from triton.runtime._async_compile import AsyncCompileMode
        except ImportError as exc:  # older Triton: plain sequential autotuning
            return f"no AsyncCompileMode: {exc}"
        args = list(tuner.nargs.values())
        try:
            with ThreadPoolExecutor(max_workers=self.workers) as ex, AsyncCompileMode(ex, ignore_errors=True):
                for cfg in configs:
                    kw = dict(kwargs)
                    kw.update(cfg.all_kwargs())
                    kw["warmup"] = True
                    tuner.fn.run(*args, **kw)
        except Exception as exc:  # noqa: BLE001 - a failed pre-compile only costs time, never correctness
            return f"{type(exc).__name__}: {exc}"[:300]
        return None

    def reset(self, reason: str) -> int:
        """Forget every fla tuning (in memory, and stop reading Triton's on-disk autotune cache, whose key
        ignores shapes) so the next call of each kernel tunes again at the current shape."""
        n = 0
        for t in self.tuners:
            n += len(t.cache)
            t.cache.clear()
            t.cache_results = False
        if self.sink:
            self.sink({"kind": "autotune_reset", "reason": reason, "entries_cleared": n, "phase": self.phase})
        return n
