"""A stand-in verifier for the shard tests that takes its own process down on one chosen kernel.

``LETHE_KILLER_ID`` names the kernel: verifying it SIGKILLs the calling process (what a kernel that escapes
its sandbox, or a verifier bug in the shard's own process, would do). Every other kernel gets
``lethe.audit.testing.fake_verify``'s row, so a test can tell each row's origin.
"""

from __future__ import annotations

import os
import signal

from lethe.audit.testing import fake_verify


def verify(**kw):
    if kw.get("kernel_id") == os.environ.get("LETHE_KILLER_ID"):
        os.kill(os.getpid(), signal.SIGKILL)
    return fake_verify(**kw)
