import torch
import torch.nn as nn

BATCH, IN_F, OUT_F = 8, 32, 16


class Model(nn.Module):
    """A dense layer: x @ W^T + b."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return self.fc(x)


def get_inputs():
    return [torch.randn(BATCH, IN_F)]


def get_init_inputs():
    return [IN_F, OUT_F]
