"""Native (CUTLASS CuTe DSL) kernels of the GDN-family backward.

* :mod:`.k1_hopper` -- K1, the reverse-time inter-chunk state scan, for sm_90a (runs on the H200);
* :mod:`.k1_blackwell` -- a tcgen05 / TMEM kernel for sm_100a, compiled ahead of time only (no B200 here);
* :mod:`.k2_hopper` -- K2, the WY / triangular-inverse VJP, for sm_90a (SIMT float32; plan in
  :mod:`.k2_hopper_plan`, float64 replay of its order in :mod:`.k2_hopper_model`);
* :mod:`.k2_blackwell` -- K2 as tcgen05 products for sm_100a, compiled ahead of time only;
* :mod:`.api` -- host wrappers (torch tensors in, torch tensors out) and the compile cache, K1 and K2;
* :mod:`.aot` -- ahead-of-time compilation on a CPU with fake tensors and inspection of the PTX / cubin;
* :mod:`.backend` -- the object the family's autograd chooser calls for ``backend="native"``.

Importing this package does not import the CuTe DSL; the submodules that need it do, so a machine without
``nvidia-cutlass-dsl`` can still import :mod:`kernels.gdn` and skip the native path cleanly.
"""

CUTE_DSL_PIN = "nvidia-cutlass-dsl==4.8.1"


def cute_dsl_available() -> bool:
    """True when the CuTe DSL can be imported (needed for every compile, ahead of time or on the GPU)."""
    try:
        import cutlass.cute  # noqa: F401
    except Exception:  # pragma: no cover - depends on the environment
        return False
    return True
