"""Launch tuning of C1 (``forward_chunked_scan``): its launch space, the ``scan_mode="auto"`` rule, a kNN cost model
over shape features, and the policy comparison a launch search is judged by.

A leaf module: plain Python and math, no Triton or kernel import, so the chooser, the GPU driver
(``experiments/mamba/launch_search.py``), the renderers and the CPU tests all read the same definitions.

Launch knobs of C1 (all chooser parameters, compile-time constants of the Triton kernels, never forked kernels):

- ``scan_mode``: ``"serial"`` (one program walks all of time per channel block, grid ``batch x d-blocks``) or
  ``"chunk_parallel"`` (local scans of every chunk side by side, a carry pass, a fix-up: grid
  ``batch x d-blocks x chunks``);
- ``chunk``: steps per chunk (the checkpoint spacing of the serial walk; the parallel grain of chunk_parallel);
- ``num_warps``;
- ``state_tile``: float32 state values one program holds, ``BLOCK_D x BLOCK_N``; BLOCK_N is N rounded up to a power
  of two and ``BLOCK_D = state_tile // BLOCK_N`` (at least 1, at most d_model rounded up). 2048 is the Triton path's
  own rule (``block_sizes``), so the tile is named shape-free and one configuration means the same at every shape.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Iterable, Mapping, Sequence

SCAN_MODES = ("serial", "chunk_parallel")

#: The Triton path's own state budget per program (``triton_path.block_sizes``).
DEFAULT_STATE_TILE = 2048

#: SM count assumed where no CUDA device can be asked (the CPU interpreter): this project's GPU, the H200.
DEFAULT_SM_COUNT = 132

# The auto rule's two thresholds, read off the authors' forward records (scan_mode_boundary.json, B200): at a
# sequence of 512 the serial walk won at every batch and width, and at 1024 and beyond chunk_parallel won until the
# serial grid's state reached between about 1.8 and 3.5 thousand values per SM (batch 8, width 2048 against width
# 4096, at N 16). One default tile per SM sits in that gap. They are where the records put the boundary, not an
# H200 measurement: the launch search reports where this rule and the measured best mode disagree.
CP_MIN_SEQ_LEN = 1024
CP_STATES_PER_SM = DEFAULT_STATE_TILE


def _next_pow2(x: int) -> int:
    return 1 << max(0, (int(x) - 1).bit_length())


@dataclass(frozen=True, order=True)
class LaunchConfig:
    """One point of C1's launch space (see the module docstring for each knob)."""

    scan_mode: str = "serial"
    chunk: int = 64
    num_warps: int = 4
    state_tile: int = DEFAULT_STATE_TILE

    def __post_init__(self):
        if self.scan_mode not in SCAN_MODES:
            raise ValueError(f"scan_mode must be one of {SCAN_MODES}, got {self.scan_mode!r}")
        if self.chunk < 1 or self.num_warps < 1 or self.state_tile < 1:
            raise ValueError(f"chunk, num_warps and state_tile must be positive: {self}")

    @property
    def name(self) -> str:
        """Stable identifier used in result rows (``serial_c64_w4_t2048``, ``cp_c256_w8_t2048``)."""
        mode = "serial" if self.scan_mode == "serial" else "cp"
        return f"{mode}_c{self.chunk}_w{self.num_warps}_t{self.state_tile}"

    def block_d(self, d_model: int, n_state: int) -> int:
        """BLOCK_D at a shape: the state tile over BLOCK_N, clamped to [1, d_model rounded up to a power of two]."""
        return max(1, min(_next_pow2(d_model), self.state_tile // _next_pow2(n_state)))

    def kwargs(self, d_model: int, n_state: int) -> dict:
        """The chooser's keyword arguments for this configuration at a shape."""
        return dict(scan_mode=self.scan_mode, chunk=self.chunk, num_warps=self.num_warps,
                    block_d=self.block_d(d_model, n_state))

    def as_dict(self) -> dict:
        return {**asdict(self), "name": self.name}


#: What ``forward_chunked_scan`` runs when called without launch arguments; the baseline of every speed-up.
DEFAULT_CONFIG = LaunchConfig()


def launch_space(serial_warps: Sequence[int] = (2, 4, 8), serial_tiles: Sequence[int] = (1024, 2048),
                 cp_chunks: Sequence[int] = (64, 128, 256, 512), cp_warps: Sequence[int] = (4, 8),
                 cp_tiles: Sequence[int] = (DEFAULT_STATE_TILE,)) -> list[LaunchConfig]:
    """The searched configurations, default first. The serial walk's chunk only spaces its checkpoints, so it stays
    at the default; chunk_parallel's chunk is its parallel grain and is searched. Modest on purpose: every new
    combination of compile-time constants compiles, and the whole grid must fit a few minutes of one GPU."""
    space = [DEFAULT_CONFIG]
    for w in serial_warps:
        for t in serial_tiles:
            space.append(LaunchConfig("serial", DEFAULT_CONFIG.chunk, w, t))
    for c in cp_chunks:
        for w in cp_warps:
            for t in cp_tiles:
                space.append(LaunchConfig("chunk_parallel", c, w, t))
    seen, out = set(), []
    for cfg in space:
        if cfg not in seen:
            seen.add(cfg)
            out.append(cfg)
    return out


def config_from_dict(d: Mapping) -> LaunchConfig:
    return LaunchConfig(d["scan_mode"], int(d["chunk"]), int(d["num_warps"]), int(d["state_tile"]))


# ------------------------------------------------------------------------------------------ the auto rule
def select_scan_mode(batch: int, seq_len: int, d_model: int, n_state: int, sm_count: int = DEFAULT_SM_COUNT) -> str:
    """The ``scan_mode="auto"`` rule: chunk_parallel when the sequence is long (``seq_len >= CP_MIN_SEQ_LEN``) and
    the serial walk's state, ``batch * d_model * n_state`` values, is less than ``CP_STATES_PER_SM`` per SM.

    Why: the serial walk runs ``seq_len`` dependent steps in each of ``batch x d-blocks`` programs, so its time is
    the sequence length times the number of waves; when those programs leave most SMs idle, splitting time into
    chunks fills them, at the price of a second pass over the outputs and a carry. A saturated grid gains nothing
    from the split and still pays the price; a short sequence has too few chunks to pay for the extra launches."""
    if min(batch, seq_len, d_model, n_state, sm_count) < 1:
        raise ValueError(f"select_scan_mode: sizes must be positive, got {(batch, seq_len, d_model, n_state, sm_count)}")
    if seq_len < CP_MIN_SEQ_LEN:
        return "serial"
    return "chunk_parallel" if batch * d_model * n_state < CP_STATES_PER_SM * sm_count else "serial"


def device_sm_count(device) -> int:
    """SMs of a CUDA device; :data:`DEFAULT_SM_COUNT` for any other device (the CPU interpreter)."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return DEFAULT_SM_COUNT


def selector_config(batch: int, seq_len: int, d_model: int, n_state: int, sm_count: int = DEFAULT_SM_COUNT,
                    ) -> LaunchConfig:
    """What ``forward_chunked_scan(..., scan_mode="auto")`` runs with every other argument at its default."""
    mode = select_scan_mode(batch, seq_len, d_model, n_state, sm_count)
    return LaunchConfig(mode, DEFAULT_CONFIG.chunk, DEFAULT_CONFIG.num_warps, DEFAULT_CONFIG.state_tile)


# ------------------------------------------------------------------------------------------ error bounds
#: unit roundoff of each arithmetic dtype (by name, so this module needs no torch)
UNIT_ROUNDOFF = {"float64": 2.0**-53, "float32": 2.0**-24}


def gamma(m: int, u: float) -> float:
    """Higham's gamma_m = m u / (1 - m u): the relative error bound of m rounded operations (ch. 3)."""
    if m * u >= 1:
        raise ValueError(f"gamma: m u = {m * u} >= 1, no bound")
    return m * u / (1 - m * u)


def forward_steps(cfg: LaunchConfig, seq_len: int, n_state: int) -> int:
    """Rounded operations on the longest dependency chain of y_t: 6 per time step (delta A, the exp at 2 ulp, Abar h,
    delta u, times B, the add), then the N-term read-out and the D skip; chunk_parallel adds chunk (chunk + 1): its
    decays are exponentials of running sums of up to ``chunk`` steps (the bound the CPU tests hold it to)."""
    m = 6 * seq_len + n_state + 2
    if cfg.scan_mode == "chunk_parallel":
        m += cfg.chunk * (cfg.chunk + 1)
    return m


def forward_error_bound(cfg: LaunchConfig, seq_len: int, n_state: int, arith: str = "float32") -> float:
    """Relative bound on |y - y_exact| as a multiple of the magnitude recurrence's Y (``selective_scan_magnitude``)."""
    return gamma(forward_steps(cfg, seq_len, n_state), UNIT_ROUNDOFF[arith])


# ------------------------------------------------------------------------------------------ shapes, rows, policies
@dataclass(frozen=True, order=True)
class Shape:
    batch: int
    seq_len: int
    d_model: int
    n_state: int

    @property
    def name(self) -> str:
        return f"b{self.batch}_l{self.seq_len}_d{self.d_model}_n{self.n_state}"

    def features(self) -> tuple[float, ...]:
        """The kNN's features: log2 of each size (the sizes span orders of magnitude; a doubling is one unit)."""
        return tuple(math.log2(v) for v in (self.batch, self.seq_len, self.d_model, self.n_state))


def shape_of(row: Mapping) -> Shape:
    s = row["shape"]
    return Shape(int(s["batch"]), int(s["seq_len"]), int(s["d_model"]), int(s["n_state"]))


def measured_times(rows: Iterable[Mapping]) -> dict[Shape, dict[LaunchConfig, float]]:
    """{shape: {config: median ms}} over the rows that passed correctness and were timed (status "ok"); a shape
    whose default configuration has no time is left out (nothing to measure a speed-up against)."""
    table: dict[Shape, dict[LaunchConfig, float]] = defaultdict(dict)
    for r in rows:
        if r.get("status") == "ok" and r.get("median_ms") is not None:
            table[shape_of(r)][config_from_dict(r["config"])] = float(r["median_ms"])
    return {s: t for s, t in sorted(table.items()) if DEFAULT_CONFIG in t}


def geomean(xs: Sequence[float]) -> float | None:
    xs = list(xs)
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def knn_predict(train: Mapping[Shape, Mapping[LaunchConfig, float]], query: Shape, k: int = 3) -> LaunchConfig:
    """The kNN cost model: the k training shapes nearest to ``query`` (Euclidean on :meth:`Shape.features`, ties by
    shape order, so the prediction is deterministic) vote with their relative times; the prediction is the
    configuration measured at every neighbour whose mean log(time / default time) is least (ties by config order).

    Relative times, so that a slow shape does not outweigh a fast one; configurations missing at a neighbour (a
    correctness failure there) are not predicted, since nothing says they are right at the query."""
    if not train:
        return DEFAULT_CONFIG
    qf = query.features()
    near = sorted(train, key=lambda s: (math.dist(s.features(), qf), s))[:max(1, k)]
    common = set.intersection(*(set(train[s]) for s in near))
    if not common:
        return DEFAULT_CONFIG
    def cost(cfg):
        return sum(math.log(train[s][cfg] / train[s][DEFAULT_CONFIG]) for s in near) / len(near)
    return min(sorted(common), key=cost)


def static_best(train: Mapping[Shape, Mapping[LaunchConfig, float]]) -> LaunchConfig:
    """The one configuration, measured at every training shape, with the best geometric-mean speed-up over the
    default there (ties by config order): what a fixed new default would be."""
    if not train:
        return DEFAULT_CONFIG
    common = set.intersection(*(set(t) for t in train.values()))
    return min(sorted(common), key=lambda c: sum(math.log(t[c] / t[DEFAULT_CONFIG]) for t in train.values()))


POLICIES = ("default", "selector", "static", "knn", "oracle")


def evaluate_policies(rows: Iterable[Mapping], k: int = 3, sm_count: int = DEFAULT_SM_COUNT) -> dict:
    """Each policy's configuration and speed-up over the default at every measured shape, and the geometric means.

    - ``default``: :data:`DEFAULT_CONFIG` (speed-up 1 by definition);
    - ``selector``: :func:`selector_config` (the auto rule at the chooser's other defaults);
    - ``static``: :func:`static_best` fitted leave-one-shape-out (on every other shape);
    - ``knn``: :func:`knn_predict` fitted leave-one-shape-out;
    - ``oracle``: the fastest configuration measured at the shape (the ceiling: no policy can beat it).

    A policy whose configuration was not measured correct at the shape falls back to the default there, and the
    row says so (``fallback``), so a policy is never credited with an unverified launch."""
    table = measured_times(rows)
    per_shape = []
    for shape, times in table.items():
        others = {s: t for s, t in table.items() if s != shape}
        t_def = times[DEFAULT_CONFIG]
        picks = {
            "default": DEFAULT_CONFIG,
            "selector": selector_config(shape.batch, shape.seq_len, shape.d_model, shape.n_state, sm_count),
            "static": static_best(others),
            "knn": knn_predict(others, shape, k),
            "oracle": min(sorted(times), key=lambda c: times[c]),
        }
        entry = {"shape": shape.name, **asdict(shape), "default_ms": t_def, "oracle_mode": picks["oracle"].scan_mode}
        for pol, cfg in picks.items():
            ok = cfg in times
            used = cfg if ok else DEFAULT_CONFIG
            entry[pol] = {"config": used.name, "scan_mode": used.scan_mode, "speedup": t_def / times[used],
                          "fallback": not ok}
        per_shape.append(entry)
    return {
        "k": k,
        "sm_count": sm_count,
        "shapes": len(per_shape),
        "per_shape": per_shape,
        "geomean": {p: geomean([e[p]["speedup"] for e in per_shape]) for p in POLICIES},
        # shapes where the auto rule picks the mode of the fastest measured configuration
        "selector_mode_agrees": sum(e["selector"]["scan_mode"] == e["oracle_mode"] for e in per_shape),
    }


__all__ = [
    "CP_MIN_SEQ_LEN", "CP_STATES_PER_SM", "DEFAULT_CONFIG", "DEFAULT_SM_COUNT", "DEFAULT_STATE_TILE", "LaunchConfig",
    "POLICIES", "SCAN_MODES", "Shape", "config_from_dict", "device_sm_count", "evaluate_policies", "forward_error_bound",
    "forward_steps", "gamma", "geomean", "knn_predict", "launch_space", "measured_times", "select_scan_mode",
    "selector_config", "shape_of", "static_best",
]
