"""The scale run's model: the named ~1.1e9 configs counted on the meta device, both paths, the dispatch log."""

import pytest
import torch

from lethe.scale.model import CONFIGS, ByteLM, analytic_parameters, build, count_parameters, get_config


@pytest.mark.parametrize("name", ["1b", "1b-gdn"])
def test_named_billion_config_in_range(name):
    n = analytic_parameters(get_config(name))
    print(f"{name}: {n:,} parameters")
    assert 1.0e9 <= n <= 1.2e9


def test_analytic_count_matches_a_built_model():
    cfg = get_config("tiny")
    assert analytic_parameters(cfg) == count_parameters(build(cfg))


def test_unknown_names_refused():
    with pytest.raises(KeyError):
        get_config("huge")
    with pytest.raises(ValueError):
        ByteLM(get_config("tiny"), path="cuda")
    with pytest.raises(ValueError):
        ByteLM(get_config("tiny", mixer="rnn"))


@pytest.mark.parametrize("mixer", ["mamba", "gdn"])
def test_init_is_deterministic(mixer):
    a, b = build(get_config("tiny", mixer=mixer), "torch", seed=3), build(get_config("tiny", mixer=mixer), seed=3)
    assert all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values(), strict=True))


@pytest.mark.parametrize("mixer", ["mamba", "gdn"])
def test_ours_path_records_dispatch_forward_and_backward(mixer):
    cfg = get_config("tiny", mixer=mixer)
    torch.manual_seed(0)
    tok = torch.randint(0, 256, (1, 16))
    ours, ref = build(cfg, "ours", seed=1), build(cfg, "torch", seed=1)
    lo, lr = ours(tok), ref(tok)
    assert lo.shape == (1, 16, 256)
    torch.testing.assert_close(lo, lr, rtol=1e-4, atol=1e-5)
    lo.sum().backward()
    d = ours.dispatch.as_dict()
    assert list(d["forward"].values()) == [cfg.n_layers] and d["forward"] == d["backward"]
    (key,) = d["forward"]
    assert key.endswith("FusedBlockFunctionBackward" if mixer == "mamba" else "ChunkGDNFunctionBackward")
    assert ref.dispatch.as_dict() == {"forward": {}, "backward": {}}


def test_configs_are_named():
    assert {"tiny", "1b", "1b-gdn"} <= set(CONFIGS)
