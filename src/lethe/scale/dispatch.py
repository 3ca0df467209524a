"""The dispatch proof: which functions a model's forward and backward actually called.

A mixer that runs through our kernels records, per call, the autograd node its output hangs from (the class of
``out.grad_fn``: ``FusedBlockFunctionBackward`` for C5/C6, ``ChunkGDNFunctionBackward`` for ``chunk_family``) and
the backend the op's chooser resolved; a hook on that node counts its backward runs. The counts are what the
autograd engine did, not what the config asked for, so a silent fallback to another path shows up as a missing or
different name. Nothing in the kernels is changed for this.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path


class DispatchLog:
    """Counts of forward calls ``(op, backend, node)`` and of backward runs of those nodes."""

    def __init__(self) -> None:
        self.forward: Counter = Counter()
        self.backward: Counter = Counter()

    def record(self, op: str, backend: str, out) -> None:
        """Count one forward call of ``op`` on ``backend`` whose result is ``out``; hook its node's backward."""
        node = type(out.grad_fn).__name__ if out.grad_fn is not None else "no_grad"
        key = f"{op}|{backend}|{node}"
        self.forward[key] += 1
        if out.grad_fn is not None:
            out.grad_fn.register_hook(lambda *_: self.backward.__setitem__(key, self.backward[key] + 1))

    def reset(self) -> None:
        self.forward.clear()
        self.backward.clear()

    def as_dict(self) -> dict:
        """``{"forward": {key: n}, "backward": {key: n}}`` with keys ``op|backend|autograd node``, sorted."""
        return {"forward": dict(sorted(self.forward.items())), "backward": dict(sorted(self.backward.items()))}

    def write(self, file: str | os.PathLike[str], **extra) -> None:
        """Write the counts (and ``extra`` fields) as JSON, atomically."""
        path = Path(file)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps({**extra, **self.as_dict()}, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, path)
