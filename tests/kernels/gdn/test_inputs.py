"""lethe.kernels.gdn.inputs: the GDN benchmarks' float64 master inputs are a function of the seed alone, have the
shapes each member takes, and the error metric is max|x - ref| / max|ref| computed in float64."""

import torch
from lethe.kernels.gdn import inputs


def test_masters_repeat_per_seed_and_differ_between_seeds():
    """Same seed, same tensors bit for bit (on every machine: drawn on the CPU in float64); another seed differs."""
    a = inputs.make_inputs(1, 8, 2, 4, 3, 7, "cpu")
    b = inputs.make_inputs(1, 8, 2, 4, 3, 7, "cpu")
    c = inputs.make_inputs(1, 8, 2, 4, 3, 8, "cpu")
    assert all(torch.equal(a[n], b[n]) for n in a) and not torch.equal(a["q"], c["q"])
    assert all(t.dtype == torch.float64 for t in a.values())


def test_shapes_and_ranges_follow_the_member():
    """Keys are unit vectors, decays are log-sigmoids (negative), erase in [0, 2], write and beta in [0, 1]; the
    scalar-gate members take one decay per head."""
    x = inputs.make_inputs(2, 8, 3, 4, 5, 1, "cpu")
    assert x["q"].shape == (2, 8, 3, 4) and x["v"].shape == (2, 8, 3, 5) and x["g"].shape == (2, 8, 3, 4)
    assert torch.allclose(x["k"].norm(dim=-1), torch.ones(2, 8, 3, dtype=torch.float64))
    assert (x["g"] < 0).all() and (0 <= x["b"]).all() and (x["b"] <= 2).all()
    assert (0 <= x["w"]).all() and (x["w"] <= 1).all() and x["beta"].shape == (2, 8, 3)
    for member in ("ssd", "sgdn"):
        assert inputs.make_inputs(2, 8, 3, 4, 5, 1, "cpu", member=member)["g"].shape == (2, 8, 3)


def test_member_args_name_each_members_leaves():
    """chunk_family's leaves per member; KDA-like members take beta as their erase."""
    x = inputs.make_inputs(1, 4, 1, 2, 2, 0, "cpu")
    assert inputs.member_args("la", x)[0] == ["q", "k", "v"]
    assert inputs.member_args("gla", x)[0] == ["q", "k", "v", "g"]
    assert inputs.member_args("gdn", x)[0] == ["q", "k", "v", "g", "b", "w"]
    names, src = inputs.member_args("kda", x)
    assert names == ["q", "k", "v", "g", "b"] and src["b"] is x["beta"]
    assert inputs.family_member("sgdn") == "kda" and inputs.family_member("gdn") == "gdn"


def test_rel_err_and_nonfinite():
    """The metric divides the worst absolute error by the reference's largest magnitude, in float64."""
    ref = torch.tensor([1.0, -4.0, 2.0])
    assert inputs.rel_err(torch.tensor([1.0, -4.0, 2.5]), ref) == 0.125
    assert inputs.rel_err(ref.float(), ref.double()) == 0.0
    assert inputs.nonfinite(torch.tensor([1.0, float("nan"), float("inf"), -float("inf")])) == 3
