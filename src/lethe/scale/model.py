"""A byte-level language model of pre-norm residual blocks whose mixers run through our kernels.

``ByteLM``: embedding (vocab 256) -> ``n_layers`` x [x + mixer(RMSNorm(x))] -> RMSNorm -> LM head (untied).

Mixers (``ModelConfig.mixer``):

* ``"mamba"``: the Mamba-1 block. in_proj to (x, z) of width ``d_inner``; the causal depthwise conv1d, SiLU,
  the selective scan (delta, B, C projected from the conv's output as in Mamba-1) and an RMSNorm over channels
  run as one op, :func:`lethe.kernels.mamba.fused_block` (C5 forward, C6 backward); then y * silu(z) and
  out_proj. The RMSNorm before the gate is the fused block's (Mamba-2 places one there; Mamba-1 has none).
* ``"gdn"``: a gated delta-rule layer through :func:`lethe.kernels.gdn.chunk_family` (``member`` ``"kda"`` with a
  per-head decay is the scalar-gate gated delta rule, Gated DeltaNet's recurrence): q, k (L2-normalised per head),
  v, a per-head log-decay g = -softplus, beta = sigmoid; o * silu(gate) -> out_proj.

``path="torch"`` runs the same equations in plain torch ops differentiated by autograd (a loop over time: the
reference the kernels are compared against, :func:`lethe.scale.train.compare_paths`); ``path="ours"`` runs the
mixer's core through our autograd Functions, recorded in a :class:`lethe.scale.dispatch.DispatchLog`.
The kernels are called in float32 whatever the autocast (they compute in float32 anyway).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from .dispatch import DispatchLog

PATHS = ("torch", "ours")
MIXERS = ("mamba", "gdn")
VOCAB = 256


@dataclass(frozen=True)
class ModelConfig:
    """Sizes of a :class:`ByteLM`. ``d_inner = expand * d_model``; ``dt_rank`` 0 means ceil(d_model / 16)."""

    d_model: int = 64
    n_layers: int = 2
    mixer: str = "mamba"
    expand: int = 2
    d_state: int = 16
    d_conv: int = 4
    dt_rank: int = 0
    n_heads: int = 4
    head_dim: int = 16
    member: str = "kda"
    chunk: int = 64
    kernel_backend: str = "auto"
    eps: float = 1e-6

    @property
    def d_inner(self) -> int:
        return self.expand * self.d_model

    @property
    def rank(self) -> int:
        return self.dt_rank or math.ceil(self.d_model / 16)

    def to_dict(self) -> dict:
        return asdict(self)


# Named sizes. "1b" is the scale run's model (Mamba-1 blocks, ~1.1e9 parameters); "1b-gdn" the GDN variant.
CONFIGS: dict[str, ModelConfig] = {
    "tiny": ModelConfig(d_model=32, n_layers=2, d_state=4, n_heads=2, head_dim=16, chunk=16),
    "small": ModelConfig(d_model=256, n_layers=4, n_heads=4, head_dim=64),
    "1b": ModelConfig(d_model=2048, n_layers=42),
    "1b-gdn": ModelConfig(d_model=2048, n_layers=52, mixer="gdn", n_heads=16, head_dim=128),
}


def get_config(name: str, **overrides) -> ModelConfig:
    """The named config with ``overrides`` (e.g. ``mixer="gdn"``); unknown names are refused."""
    if name not in CONFIGS:
        raise KeyError(f"unknown model config {name!r}; expected one of {sorted(CONFIGS)}")
    return replace(CONFIGS[name], **overrides)


def _causal_conv(x_pad, w, bias):
    """Depthwise causal conv1d on ``x_pad`` ``[b, L + K - 1, d]`` (K - 1 zero rows first), w ``[d, K]``."""
    k = w.shape[1]
    L = x_pad.shape[1] - k + 1
    return sum(w[:, j] * x_pad[:, j:j + L] for j in range(k)) + bias


def fused_block_torch(x_pad, w, bias, delta, A, B, C, D, norm_weight, eps):
    """conv1d, SiLU, the selective scan and RMSNorm in plain torch ops (the reference path of C5/C6)."""
    v = F.silu(_causal_conv(x_pad, w, bias))
    h = v.new_zeros(v.shape[0], v.shape[2], A.shape[1])
    ys = []
    for t in range(v.shape[1]):
        h = torch.exp(delta[:, t, :, None] * A) * h + (delta[:, t] * v[:, t])[:, :, None] * B[:, t, None, :]
        ys.append((h * C[:, t, None, :]).sum(-1) + D * v[:, t])
    y = torch.stack(ys, 1)
    return y * (y.pow(2).mean(-1, keepdim=True) + eps).rsqrt() * norm_weight


def gated_delta_torch(q, k, v, g, beta, scale):
    """S <- exp(g) S; S <- S + beta k (v - S^T k)^T; o = S^T (scale q), one step at a time (reference path of
    ``chunk_family(member="kda")`` with a per-head g ``[B, T, H]`` and beta ``[B, T, H]``)."""
    Bsz, T, H, K = q.shape
    S = q.new_zeros(Bsz, H, K, v.shape[-1])
    outs = []
    for t in range(T):
        S = torch.exp(g[:, t])[:, :, None, None] * S
        kt = k[:, t]
        resid = v[:, t] - torch.einsum("bhkv,bhk->bhv", S, kt)
        S = S + beta[:, t, :, None, None] * kt.unsqueeze(-1) * resid.unsqueeze(-2)
        outs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t] * scale))
    return torch.stack(outs, 1)


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        return (xf * (xf.pow(2).mean(-1, keepdim=True) + self.eps).rsqrt() * self.weight).to(x.dtype)


class MambaMixer(nn.Module):
    """The Mamba-1 mixer around the fused block (module docstring)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        E, N, R = cfg.d_inner, cfg.d_state, cfg.rank
        self.cfg = cfg
        self.in_proj = nn.Linear(cfg.d_model, 2 * E, bias=False)
        self.conv_weight = nn.Parameter(torch.empty(E, cfg.d_conv))
        self.conv_bias = nn.Parameter(torch.zeros(E))
        self.x_proj = nn.Linear(E, R + 2 * N, bias=False)
        self.dt_proj = nn.Linear(R, E, bias=True)
        self.A_log = nn.Parameter(torch.empty(E, N))
        self.D = nn.Parameter(torch.ones(E))
        self.norm_weight = nn.Parameter(torch.ones(E))
        self.out_proj = nn.Linear(E, cfg.d_model, bias=False)

    @torch.no_grad()
    def reset_parameters(self) -> None:
        cfg = self.cfg
        nn.init.uniform_(self.conv_weight, -cfg.d_conv ** -0.5, cfg.d_conv ** -0.5)
        self.A_log.copy_(torch.log(torch.arange(1, cfg.d_state + 1, dtype=torch.float32)).expand_as(self.A_log))
        # dt in [1e-3, 1e-1] log-uniformly, through softplus's inverse (Mamba-1's init)
        dt = torch.exp(torch.rand(cfg.d_inner) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
        self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))

    def forward(self, x, path: str, log: DispatchLog | None):
        cfg = self.cfg
        xz = self.in_proj(x)
        xi, z = xz.float().chunk(2, dim=-1)
        x_pad = F.pad(xi, (0, 0, cfg.d_conv - 1, 0))
        u = F.silu(_causal_conv(x_pad, self.conv_weight, self.conv_bias))
        dbc = self.x_proj(u).float()
        dt, B, C = dbc.split([cfg.rank, cfg.d_state, cfg.d_state], dim=-1)
        delta = F.softplus(self.dt_proj(dt).float())
        A = -torch.exp(self.A_log.float())
        args = (x_pad, self.conv_weight.float(), self.conv_bias.float(), delta, A, B.contiguous(), C.contiguous(),
                self.D.float(), self.norm_weight.float())
        if path == "torch":
            y = fused_block_torch(*args, cfg.eps)
        else:
            from lethe.kernels.mamba import fused_block
            from lethe.kernels.mamba._common import resolve_backend

            backend = resolve_backend(cfg.kernel_backend, x_pad)
            y = fused_block(*args, eps=cfg.eps, chunk=cfg.chunk, backend=backend)
            if log is not None:
                log.record("lethe.kernels.mamba.fused_block", backend, y)
        return self.out_proj((y * F.silu(z)).to(x.dtype))


class GDNMixer(nn.Module):
    """A gated delta-rule mixer through ``chunk_family`` (module docstring)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        H, Dh = cfg.n_heads, cfg.head_dim
        self.cfg = cfg
        self.qkvz = nn.Linear(cfg.d_model, 4 * H * Dh, bias=False)
        self.ab = nn.Linear(cfg.d_model, 2 * H, bias=True)
        self.out_proj = nn.Linear(H * Dh, cfg.d_model, bias=False)

    @torch.no_grad()
    def reset_parameters(self) -> None:
        nn.init.zeros_(self.ab.bias)

    def forward(self, x, path: str, log: DispatchLog | None):
        cfg = self.cfg
        Bsz, T, _ = x.shape
        H, Dh = cfg.n_heads, cfg.head_dim
        q, k, v, z = self.qkvz(x).float().view(Bsz, T, 4, H, Dh).unbind(2)
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
        a, b = self.ab(x).float().chunk(2, dim=-1)
        g = -F.softplus(a)
        beta = torch.sigmoid(b)
        scale = Dh ** -0.5
        if path == "torch":
            o = gated_delta_torch(q, k, v, g, beta, scale)
        else:
            from lethe.kernels.gdn import chunk_family
            from lethe.kernels.gdn.autograd import _resolve_backend

            backend = _resolve_backend(cfg.kernel_backend, q)
            o, _ = chunk_family(q.contiguous(), k.contiguous(), v.contiguous(), g.contiguous(), beta.contiguous(),
                                member=cfg.member, scale=scale, chunk=cfg.chunk, backend=backend)
            if log is not None:
                log.record(f"lethe.kernels.gdn.chunk_family[{cfg.member}]", backend, o)
        return self.out_proj((o * F.silu(z)).reshape(Bsz, T, H * Dh).to(x.dtype))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.norm = RMSNorm(cfg.d_model, cfg.eps)
        self.mixer = MambaMixer(cfg) if cfg.mixer == "mamba" else GDNMixer(cfg)

    def forward(self, x, path, log):
        return x + self.mixer(self.norm(x), path, log)


class ByteLM(nn.Module):
    """Embedding, ``n_layers`` pre-norm residual blocks, final norm, LM head (module docstring)."""

    def __init__(self, cfg: ModelConfig, path: str = "ours"):
        super().__init__()
        if cfg.mixer not in MIXERS:
            raise ValueError(f"unknown mixer {cfg.mixer!r}; expected one of {MIXERS}")
        if path not in PATHS:
            raise ValueError(f"unknown path {path!r}; expected one of {PATHS}")
        self.cfg = cfg
        self.path = path
        self.dispatch = DispatchLog()
        self.embed = nn.Embedding(VOCAB, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.eps)
        self.head = nn.Linear(cfg.d_model, VOCAB, bias=False)

    def init_weights(self, seed: int) -> None:
        """Deterministic initialisation from ``seed`` alone (normal 0.02 for every matrix but the conv taps and
        A_log, which the mixers initialise; the residual projections scaled by 1/sqrt(2 n_layers), as GPT-2)."""
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if p.dim() == 2 and not name.endswith(("conv_weight", "A_log")):
                    std = 0.02 / math.sqrt(2 * self.cfg.n_layers) if name.endswith("out_proj.weight") else 0.02
                    p.copy_(torch.randn(p.shape, generator=gen) * std)
                elif name.endswith("bias"):
                    p.zero_()
            prev = torch.random.get_rng_state()
            torch.manual_seed(seed)
            for blk in self.blocks:
                blk.mixer.reset_parameters()
            torch.random.set_rng_state(prev)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits ``[batch, L, 256]`` for byte ids ``[batch, L]``."""
        h = self.embed(tokens)
        log = self.dispatch if self.path == "ours" else None
        for blk in self.blocks:
            h = blk(h, self.path, log)
        return self.head(self.norm(h))


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters (each shared tensor once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters() if p.requires_grad}.values())


def analytic_parameters(cfg: ModelConfig) -> int:
    """The parameter count of ``ByteLM(cfg)`` built on the meta device: shapes only, nothing allocated."""
    with torch.device("meta"):
        return count_parameters(ByteLM(cfg))


def build(cfg: ModelConfig, path: str = "ours", seed: int = 0, device="cpu") -> ByteLM:
    """A :class:`ByteLM` initialised from ``seed`` on ``device``."""
    model = ByteLM(cfg, path)
    model.init_weights(seed)
    return model.to(device)
