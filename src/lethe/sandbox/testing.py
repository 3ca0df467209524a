"""Small child-side functions for exercising the sandbox (the hostile-kernel suite and smoke tests).

These run INSIDE the sandboxed child via ``run_isolated("lethe.sandbox.testing:<name>", ...)``.
"""

from __future__ import annotations

import types
from pathlib import Path

import numpy as np


def run_candidate_forward(payload: dict, arrays: dict[str, np.ndarray], workdir: Path):
    """Exec a KernelBench-style candidate source, build ``ModelNew(*init_inputs)`` under a fixed seed and call
    ``forward`` on the input arrays (named ``x0``, ``x1``, ... in order, moved to ``payload["device"]``).

    A tensor output comes back as the array ``out``; anything else is passed through untouched so that the
    sandbox, not this helper, classifies it (``bad_result``). If the model has a ``sandbox_report()`` method
    its dict is returned as ``result["report"]`` (hostile kernels use it to say what they attempted).
    """
    import torch

    src = payload["cand_src"]
    mod = types.ModuleType("candidate")
    mod.__file__ = str(workdir / "cand.py")
    code = compile(src, mod.__file__, "exec")
    exec(code, mod.__dict__)  # noqa: S102 - executing untrusted code is the point; we are in the sandbox
    torch.manual_seed(int(payload.get("seed", 0)))
    model = mod.ModelNew(*payload.get("init_inputs", []))
    device = payload.get("device", "cpu")
    inputs = [torch.from_numpy(arrays[f"x{i}"]).to(device) for i in range(len(arrays))]
    with torch.no_grad():
        out = model(*inputs)
    result: dict = {}
    report = getattr(model, "sandbox_report", None)
    if callable(report):
        result["report"] = report()
    if isinstance(out, torch.Tensor):
        return result, {"out": out.detach().cpu().contiguous().numpy()}
    return result, {"out": out}


def echo(payload: dict, arrays: dict[str, np.ndarray], workdir: Path):
    """Return the payload and the arrays doubled: the smallest round trip through the sandbox."""
    return {"payload": payload, "cwd": str(workdir)}, {k: v * 2 for k, v in arrays.items()}


def env_probe(payload: dict, arrays: dict[str, np.ndarray], workdir: Path):
    """Report what the child sees: selected environment variables, cwd, temp dir and resource limits."""
    import os
    import resource
    import tempfile

    keys = ["PYTHONHASHSEED", "OMP_NUM_THREADS", "CUBLAS_WORKSPACE_CONFIG", "HOME", "TMPDIR",
            "CUDA_VISIBLE_DEVICES", *payload.get("extra_keys", [])]
    return {
        "env": {k: os.environ.get(k) for k in keys},
        "cwd": os.getcwd(),
        "workdir": str(workdir),
        "gettempdir": tempfile.gettempdir(),
        "rlimit_as": resource.getrlimit(resource.RLIMIT_AS)[0],
        "rlimit_core": resource.getrlimit(resource.RLIMIT_CORE)[0],
        "hash_of_abc": hash("abc"),
    }, {}


def chatter(payload: dict, arrays: dict[str, np.ndarray], workdir: Path):
    """Write ``payload["bytes"]`` bytes to stdout then a marker line; return normally."""
    import sys

    n = int(payload["bytes"])
    line = "." * 1023 + "\n"
    for _ in range(n // 1024):
        sys.stdout.write(line)
    sys.stdout.write("END-OF-CHATTER\n")
    sys.stdout.flush()
    return {"wrote": n}, {}


def hog_and_wait(payload: dict, arrays: dict[str, np.ndarray], workdir: Path):
    """Hold ``payload["mb"]`` MB of touched memory, then sleep: the sandbox's RSS watch must stop it."""
    import time

    block = bytearray(int(payload["mb"]) << 20)
    for i in range(0, len(block), 4096):
        block[i] = 1
    time.sleep(float(payload.get("sleep_s", 30)))
    return {"survived": True}, {}


def fork_and_hang(payload: dict, arrays: dict[str, np.ndarray], workdir: Path):
    """Fork ``payload["n"]`` sleepers (half of them leave the process group with setsid), record their pids
    in ``payload["pid_file"]``, then hang: the timeout must kill all of them."""
    import os
    import time

    pids = []
    for i in range(int(payload["n"])):
        pid = os.fork()
        if pid == 0:
            try:
                if i % 2:
                    os.setsid()
                time.sleep(60)
            finally:
                os._exit(0)
        pids.append(pid)
    with open(payload["pid_file"], "w") as fh:
        fh.write(" ".join(map(str, pids)))
    while True:
        time.sleep(1)
