"""Cross-entropy as the mean over rows of logsumexp(logits) - logit[target], the log-sum-exp max-shifted."""

import torch
import torch.nn as nn

PROBLEM = "level1/95_CrossEntropyLoss.py"


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        # The shift cancels in logsumexp(x) - x[t], so autograd treats it as a constant.
        m = torch.amax(predictions, dim=1, keepdim=True).detach()
        lse = m.squeeze(1) + torch.log(torch.sum(torch.exp(predictions - m), dim=1))
        picked = torch.gather(predictions, 1, targets.long().unsqueeze(1)).squeeze(1)
        return torch.mean(lse - picked)
