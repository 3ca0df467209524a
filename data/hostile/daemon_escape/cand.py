# Hostile, bounded: double-forks a daemon (the middle process exits, the grandchild calls setsid, closes its
# stdio and sleeps 120 s), prints the daemon's pid, then leaves by os._exit before returning any result, so the
# daemon is re-parented to init and is no longer anyone's descendant. The suite asserts it is dead.
import os
import sys
import time

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        r, w = os.pipe()
        if os.fork() == 0:
            os.setsid()
            pid = os.fork()
            if pid == 0:
                os.close(r)
                os.write(w, str(os.getpid()).encode())
                os.close(w)
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                time.sleep(120)
                os._exit(0)
            os._exit(0)
        os.close(w)
        daemon = os.read(r, 32).decode()
        # The pid namespace and uid too: inside a namespace of the run's own, the daemon's number is not the
        # verifier's.
        print(f"DAEMON {daemon} {os.readlink('/proc/self/ns/pid')} {os.getuid()}", flush=True)
        sys.stdout.flush()
        time.sleep(0.2)
        os._exit(0)
