"""Shared inputs and the error metric for the GDN-family tests."""

import torch


def make_inputs(B=1, T=128, H=2, K=16, V=16, dtype=torch.float64, seed=0, scalar_g=False, decay=0.25):
    """Random q, k (L2-normalised, as the layers feed them), v, log-decays in (-inf, 0), erase in [0, 2], write in [0, 1].

    Keys are normalised and erase kept below 2 so the erase matrix I - k (b*k)^T stays a contraction,
    i.e. the recurrence is stable over the test length, as it is in the trained layers.
    """
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)
    u = lambda *s: torch.rand(*s, generator=gen, dtype=torch.float64)
    q = r(B, T, H, K)
    k = torch.nn.functional.normalize(r(B, T, H, K), dim=-1)
    v = r(B, T, H, V)
    gshape = (B, T, H) if scalar_g else (B, T, H, K)
    g = torch.nn.functional.logsigmoid(r(*gshape) + 2.0) * decay
    b = 2.0 * u(B, T, H, K)
    w = u(B, T, H, V)
    beta = u(B, T, H)
    return tuple(x.to(dtype) for x in (q, k, v, g, b, w, beta))


def rel_err(x, ref):
    """max |x - ref| / max |ref|: the per-tensor worst relative error used throughout the GDN ladder."""
    x = x.detach().double()
    ref = ref.detach().double()
    return float((x - ref).abs().max() / ref.abs().max().clamp_min(1e-300))


_RECORD = """
import json, sys
sys.argv = ["x"]
import experiments.gdn.triton_aot as m  # run from the repository root: python -c puts the cwd on sys.path
import torch
from lethe.kernels.gdn.launch_tables import entry_name
out = []
for erase in {erases!r}:
    for V in (64, 128):
        for rec in m.record_wrapper_launches(128, V, 64, torch.bfloat16, erase=erase, **{kwargs!r}):
            out.append(dict(kernel=entry_name(rec.jit.fn.__name__, rec.kwargs), V=V, erase=erase,
                            **m.launch_config(rec)))
print(json.dumps(out))
"""


def recorded_launches(erases=(True, False), **kwargs) -> list[dict]:
    """The launches the Triton wrappers make at d_k = 128, chunk 64, d_v 64 and 128, bf16 (recorded by
    experiments/gdn/triton_aot.record_wrapper_launches, nothing compiled or run), in a subprocess without the
    interpreter (a JITFunction is needed, and this test process has TRITON_INTERPRET set on a CPU machine): one
    dict per launch with the kernel (by its launch-table entry: a general kernel launched in its scalar-gate variant
    under the scalar-gate path's name for it, launch_tables.entry_name), V, the erase flag and the launch
    configuration."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, "-c", _RECORD.format(erases=tuple(erases), kwargs=kwargs)],
                         capture_output=True, text=True, env=env, timeout=300, check=True, cwd=root)
    return json.loads(res.stdout.strip().splitlines()[-1])
