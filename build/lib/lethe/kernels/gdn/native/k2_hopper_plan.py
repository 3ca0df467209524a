"""Pure-Python plan of the Hopper K2 kernel (:mod:`.k2_hopper`): thread tiles, V-tiles, shared-memory regions.

Kept apart from the kernel so the float64 model (:mod:`.k2_hopper_model`), the host wrapper and the tests can
use it without importing the CuTe DSL.
"""

from __future__ import annotations

from lethe.aot.limits import limits_for

THREADS = 256
TCOLS = 16  # threads along the output's column dimension, in every product


# the most dynamic shared memory one block may opt into on sm_90a (H100/H200), from the project's limit table
SM90_SMEM_PER_BLOCK = limits_for("sm_90a").max_shared_bytes_per_block

def v_tile(V: int) -> int:
    """Width of the V-tiles phase 1 streams through shared memory (64, or V itself when smaller)."""
    return 64 if V % 64 == 0 else V


def tile_plan(K: int = 128, V: int = 128, C: int = 64) -> dict[str, tuple[int, int, int, int, int]]:
    """Per product: (M, N, R, TM, TN): the output shape, reduction length and per-thread micro-tile (du is
    computed one V-tile at a time, so its N is the tile width). Pure Python; (M/TM) * (N/TN) must be THREADS."""
    BV = v_tile(V)
    plan = {
        "P1 dW=-(dd Hs^T)": (C, K, V, 4, K // TCOLS),
        "P4 du=T^T dd": (C, BV, C, 4, BV // TCOLS),
        "P2 dT=dd u^T+dW Xe^T": (C, C, V + K, 4, C // TCOLS),
        "P3 dXe=T^T dW": (C, K, C, 4, K // TCOLS),
        "P5 Y=T^T dT": (C, C, C, 4, C // TCOLS),
        "P6 dA=-(Y T^T)*strict": (C, C, C, 4, C // TCOLS),
    }
    for name, (M, N, _, TM, TN) in plan.items():
        if M % TM or N % TN or (M // TM) * (N // TN) != THREADS or N // TN != TCOLS:
            raise ValueError(f"{name}: tile {TM}x{TN} does not map [{M}, {N}] onto {THREADS} threads")
    return plan


def smem_words(K: int = 128, V: int = 128, C: int = 64) -> dict[str, int]:
    """float32 words of the two shared-memory regions. Every buffer is row-major with the odd row stride
    width + 1. Region T holds T for the whole kernel; region X holds, in turn, one V-tile of dd, u and Hs
    (phase 1), then dW and Xe (phase 2), then dT and Y (phase 3)."""
    BV = v_tile(V)
    return {
        "T": C * (C + 1),
        "X": max((2 * C + K) * (BV + 1), 2 * C * (K + 1), 2 * C * (C + 1)),
    }


def smem_bytes(K: int = 128, V: int = 128, C: int = 64) -> int:
    """Dynamic shared memory of one CTA: the two regions, each 16-byte aligned. Independent of V for V a
    multiple of 64 (83,200 B at K = 128, C = 64), so two CTAs fit on one sm_90a SM."""
    return sum(4 * ((w + 3) // 4 * 4) for w in smem_words(K, V, C).values())


def flops_per_chunk(K: int = 128, V: int = 128, C: int = 64) -> int:
    """FLOPs of K2's products for one chunk (2 per multiply-add; du counted over all of V)."""
    return 2 * (C * K * V + C * C * V + C * C * (V + K) + C * C * K + 2 * C * C * C)


def check(K: int, V: int, C: int) -> None:
    """Raise ValueError unless the kernel can be built for (K, V, C): C = 64 (the 16 x 16 thread grid times
    4-row micro-tiles), K and V multiples of 16, every staged tile a multiple of 256 elements."""
    if C % 16 or K % 16 or V % 16:
        raise ValueError("C, K and V must be multiples of 16")
    BV = v_tile(V)
    for rows, cols in ((C, C), (C, BV), (K, BV), (C, K)):
        if (rows * cols) % THREADS:
            raise ValueError("staging loops need every staged tile's size to be a multiple of 256")
    tile_plan(K, V, C)
    if smem_bytes(K, V, C) > SM90_SMEM_PER_BLOCK:
        raise ValueError(f"needs {smem_bytes(K, V, C):,} B of shared memory, over sm_90a's "
                         f"{SM90_SMEM_PER_BLOCK:,} B per block")


def supported(K: int, V: int, C: int) -> bool:
    """True when :func:`check` passes (the native backend falls back to the torch K2 otherwise)."""
    try:
        check(K, V, C)
    except ValueError:
        return False
    return True
