"""Native (CUTLASS CuTe DSL) kernels of the GDN-family backward.

* :mod:`.k1_hopper` -- K1, the reverse-time inter-chunk state scan, for sm_90a (runs on the H200);
* :mod:`.k1_blackwell` -- a tcgen05 / TMEM kernel for sm_100a, compiled ahead of time only (no B200 here);
* :mod:`.k2_hopper` -- K2, the WY / triangular-inverse VJP, for sm_90a (SIMT float32; plan in
  :mod:`.k2_hopper_plan`, float64 replay of its order in :mod:`.k2_hopper_model`);
* :mod:`.k1_hopper_wgmma` -- K1 on Hopper tensor cores (TMA + wgmma, sm_90a; runs on the H200), its operands
  built by the Triton kernel in :mod:`.k1_operands`;
* :mod:`.k2_blackwell` -- K2 as tcgen05 products for sm_100a, compiled ahead of time only;
* :mod:`.k2_hopper_wgmma` -- K2 on Hopper tensor cores (TMA + wgmma, sm_90a), compiled ahead of time, not yet run;
* :mod:`.api` -- host wrappers (torch tensors in, torch tensors out) and the compile cache, K1 and K2;
* :mod:`.aot` -- ahead-of-time compilation on a CPU with fake tensors and inspection of the PTX / cubin;
* :mod:`.backend` -- the objects the family's autograd chooser calls for ``backend="native"``, ``"hybrid"`` and
  ``"hybrid-tc"``;
* :mod:`.bench`, :mod:`.bench_wgmma`, :mod:`.bench_stages` -- the H200 benchmark of K1 and K2 (its SIMT and
  tensor-core stages, their order and guarded loop; driver experiments/native/bench.py);
* :mod:`.kernel_profile` -- a backward's kernel-level profile (driver experiments/native/kernel_profile.py).

Importing this package does not import the CuTe DSL; the submodules that need it do, so a machine without
``nvidia-cutlass-dsl`` can still import :mod:`lethe.kernels.gdn` and skip the native path cleanly.
"""

import functools

CUTE_DSL_PIN = "nvidia-cutlass-dsl==4.8.1"
# The device class the sm_90a kernels were written for and verified on (H100 / H200).
HOPPER_CAPABILITY = (9, 0)


@functools.lru_cache(maxsize=1)
def cute_dsl_available() -> bool:
    """True when the CuTe DSL can be imported (needed for every compile, ahead of time or on the GPU)."""
    try:
        import cutlass.cute  # noqa: F401
    except Exception:  # pragma: no cover - depends on the environment
        return False
    return True


def hopper_native_ok(device) -> str | None:
    """None when the sm_90a native kernels can run on ``device`` (a CUDA device of capability 9.0 and the CuTe
    DSL importable), else the reason they cannot, in words."""
    import torch

    if torch.device(device).type != "cuda":
        return "not a CUDA device"
    cap = torch.cuda.get_device_capability(device)
    if tuple(cap) != HOPPER_CAPABILITY:
        return (f"the native kernels are built for sm_90a (H100/H200) and this GPU is sm_{cap[0]}{cap[1]}; "
                "use backend='triton'")
    if not cute_dsl_available():
        return f"the CuTe DSL is not importable (pip install {CUTE_DSL_PIN})"
    return None
