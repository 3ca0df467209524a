import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Blocked inclusive scan: a scan inside blocks of 64, then a scan of the block totals as a carry.

    Each prefix is the sum of at most 64 in-block terms plus one carry, so the rounding error grows with the
    number of blocks rather than with the full length, as in a two-level GPU scan. fp32 arithmetic; the result
    is cast back to the input dtype.
    """

    _BLOCK = 64

    def __init__(self):
        super().__init__()

    def forward(self, x):
        xf = x.float()
        n = xf.shape[-1]
        pad = (-n) % self._BLOCK
        if pad:
            xf = torch.nn.functional.pad(xf, (0, pad))
        blocks = xf.reshape(*xf.shape[:-1], -1, self._BLOCK)
        inner = torch.cumsum(blocks, dim=-1)
        totals = inner[..., -1]
        # Exclusive scan of the block totals by shifting, not as cumsum(totals) - totals: the subtraction turns
        # a NaN or an infinity in a later block into NaN for every earlier block (inf - inf).
        carry = torch.nn.functional.pad(torch.cumsum(totals, dim=-1)[..., :-1], (1, 0))
        y = (inner + carry.unsqueeze(-1)).reshape(*xf.shape[:-1], -1)[..., :n]
        return y.to(x.dtype)
