"""Candidate extraction, operator classes and the Sakana CUDA -> ModelNew conversion."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest
import torch

from lethe.corpora import classify as C
from lethe.corpora import extract as E
from lethe.corpora import sakana as S

FENCE = "```"


def block(code, lang="python"):
    return f"{FENCE}{lang}\n{code}\n{FENCE}"


def test_last_assistant_turn_with_modelnew_wins():
    msgs = [
        {"role": "user", "content": block("class ModelNew: pass  # user-quoted, never a candidate")},
        {"role": "assistant", "content": "plan\n" + block("class ModelNew: v = 1")},
        {"role": "user", "content": "feedback"},
        {"role": "assistant", "content": block("class ModelNew: v = 2") + "\nthen\n" + block("class ModelNew: v = 3")
         + "\n" + block("print('helper without the class')")},
        {"role": "user", "content": "feedback"},
        {"role": "assistant", "content": "no code this time " + block("x = 1") + block("class ModelNew: v=9", "cpp")},
    ]
    cand, turn = E.extract_candidate(msgs)
    assert cand.strip() == "class ModelNew: v = 3" and turn == 3
    assert E.extract_candidate(msgs[:1]) == (None, None)


def test_item_id_is_str_uuid_and_reference_is_original_code():
    row = {"uuid": 4242, "original_python_code": "import torch\nclass Model:\n  def forward(s,x): return x.cumsum(0)",
           "final_speedup": 1.2, "messages": [{"role": "assistant", "content": block("class ModelNew: pass")}]}
    item = E.to_item(row)
    assert item["id"] == "4242" and item["op_class"] == "scan" and item["reference"].startswith("import torch")


@pytest.mark.parametrize("src, cls", [
    ("y = F.scaled_dot_product_attention(q, k, v)\nz = torch.matmul(y, w)", "attention"),
    ("s = torch.softmax(q @ k.transpose(-1, -2), -1)", "attention"),
    ("y = torch.cumsum(x, dim=1) @ w", "scan"),
    ("y = torch.matmul(x, w); y = torch.softmax(y, -1)", "matmul"),
    ("self.fc = nn.Linear(4, 4)", "matmul"),
    ("self.c = nn.Conv2d(3, 8, 3); self.n = nn.BatchNorm2d(8)", "conv"),
    ("y = F.layer_norm(x, x.shape[-1:]); y = y.sum()", "norm"),
    ("y = torch.log_softmax(x, dim=-1).mean()", "softmax"),
    ("y = x.sum(dim=1)", "reduction"),
    ("self.p = nn.MaxPool2d(2)", "reduction"),
    ("y = F.cross_entropy(x, t)", "reduction"),
    ("y = torch.relu(x) * 2", "elementwise"),
    ("y = x.view(4, -1).contiguous()", "other"),
])
def test_classifier_priority(src, cls):
    assert C.classify(src) == cls


def test_prose_does_not_decide_the_class():
    src = '"""Unlike attention, this is just a sum."""\nclass Model:\n    def forward(self, x):  # softmax later\n' \
          "        return torch.sum(x, dim=1)\n"
    assert C.classify(src) == "reduction"


SAKANA = Path("/work/shared/data/sakana-subset/subset.jsonl")
CUDA = """#include <torch/extension.h>
__global__ void k(const float* a, float* o, int n) {}
torch::Tensor my_fwd(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, int64_t stride) {
    return x;
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("forward", &my_fwd, "doc { with braces }");
}
"""
REF = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n):
        super(Model, self).__init__()
        self.lin = nn.Linear(n, n)
        self.stride = 2

    def forward(self, x):
        return self.lin(x)

def get_inputs():
    return [torch.randn(3, 4)]

def get_init_inputs():
    return [4]
"""


def test_sakana_candidate_binds_inputs_then_parameters(monkeypatch):
    src = S.to_candidate(CUDA, REF, ext_name="t")
    assert "PYBIND11_MODULE" not in src and "torch::Tensor my_fwd(torch::Tensor x" in src
    seen = {}

    def fake_load_inline(name, cpp_sources, cuda_sources, functions, verbose):
        seen.update(name=name, decl=cpp_sources, functions=functions)

        def my_fwd(x, w, b, stride):
            seen["stride"] = stride
            return x @ w.T + b
        return types.SimpleNamespace(my_fwd=my_fwd)

    monkeypatch.setattr("torch.utils.cpp_extension.load_inline", fake_load_inline)
    ns: dict = {}
    exec(compile(src, "cand.py", "exec"), ns)  # noqa: S102 - our own generated source
    ref_ns: dict = {}
    exec(compile(REF, "ref.py", "exec"), ref_ns)  # noqa: S102
    torch.manual_seed(0)
    ref_model = ref_ns["Model"](4)
    torch.manual_seed(0)
    cand_model = ns["ModelNew"](4)
    # Same parameters, same order, same values under the same seed.
    assert [n for n, _ in cand_model.named_parameters()] == [n for n, _ in ref_model.named_parameters()]
    assert all(torch.equal(a, b) for a, b in zip(cand_model.parameters(), ref_model.parameters(), strict=True))
    x = torch.randn(3, 4)
    assert torch.allclose(cand_model(x), ref_model(x))
    assert seen["functions"] == ["my_fwd"] and seen["stride"] == 2


def test_sakana_row_without_binding_is_reported_not_dropped():
    item = S.to_item({"Level_ID": "1", "Task_ID": "1", "Kernel_Name": "k", "CUDA_Code": "int main(){}",
                      "PyTorch_Code_Module": REF, "Correct": "True", "CUDA_Speedup_Native": "1.1"})
    assert item["candidate"] is None and "PYBIND11_MODULE" in item["extract_error"]


@pytest.mark.skipif(not SAKANA.exists(), reason="shared Sakana subset not present")
def test_real_sakana_subset_converts():
    rows = S.load_rows(SAKANA)
    sel = S.select(rows, level=1)
    assert len(sel) == 26
    items = [S.to_item(r) for r in sel]
    assert all(i["candidate"] for i in items), [i["extract_error"] for i in items if not i["candidate"]]
    for i in items:
        compile(i["candidate"], i["id"], "exec")
        assert i["op_class"] == "matmul"
    assert json.dumps(items)  # serialisable as audit items


CONV_CUDA = """#include <torch/extension.h>
torch::Tensor conv_relu_bias(torch::Tensor x, torch::Tensor conv_weight, torch::Tensor conv_bias,
                             torch::Tensor bias) {
    return x;
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &conv_relu_bias, "f"); }
"""
CONV_REF = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, cin, cout, k, bias_shape):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(cin, cout, k)
        self.bias = nn.Parameter(torch.randn(bias_shape) * 0.02)

    def forward(self, x):
        return torch.relu(self.conv(x)) + self.bias

def get_inputs():
    return [torch.randn(2, 3, 8, 8)]

def get_init_inputs():
    return [3, 4, 3, (4, 1, 1)]
"""


def test_sakana_parameters_follow_assignment_order_not_module_parameters_order(monkeypatch):
    """The archive's Conv2d+ReLU+BiasAdd host function takes (x, conv_weight, conv_bias, bias): the order
    __init__ assigned them. Module.parameters() would give bias first (own parameters before submodules')."""
    import torch.nn.functional as F

    def fake_load_inline(name, cpp_sources, cuda_sources, functions, verbose):
        def conv_relu_bias(x, conv_weight, conv_bias, bias):
            assert conv_weight.dim() == 4 and conv_bias.dim() == 1 and bias.dim() == 3
            return torch.relu(F.conv2d(x, conv_weight, conv_bias)) + bias
        return types.SimpleNamespace(conv_relu_bias=conv_relu_bias)

    monkeypatch.setattr("torch.utils.cpp_extension.load_inline", fake_load_inline)
    ns: dict = {}
    exec(compile(S.to_candidate(CONV_CUDA, CONV_REF, ext_name="c"), "cand.py", "exec"), ns)  # noqa: S102
    ref_ns: dict = {}
    exec(compile(CONV_REF, "ref.py", "exec"), ref_ns)  # noqa: S102
    torch.manual_seed(0)
    ref_model = ref_ns["Model"](3, 4, 3, (4, 1, 1))
    torch.manual_seed(0)
    cand_model = ns["ModelNew"](3, 4, 3, (4, 1, 1))
    assert [n for n, _ in cand_model.named_parameters()] == ["bias", "conv.weight", "conv.bias"]
    x = torch.randn(2, 3, 8, 8)
    assert torch.equal(cand_model(x), ref_model(x))


def test_sakana_rows_become_a_kernelbench_run_against_their_own_reference(tmp_path):
    from lethe.audit.batch import discover

    def row(name, cuda=CUDA, correct=True):
        return {"Op_Name": "1_Tiny", "Level_ID": 1, "Task_ID": 1, "Kernel_Name": name, "CUDA_Code": cuda,
                "PyTorch_Code_Module": REF, "Correct": correct, "CUDA_Speedup_Native": 1.0}

    rows = [row("zeta"), row("alpha", correct=False), row("broken", cuda="int main() {}")]
    m = S.materialise_kb_layout(rows, tmp_path)
    assert [(x["kernel_name"], x["id"]) for x in m] == [("alpha", "level_1_problem_1_sample_0"),
                                                       ("broken", "level_1_problem_1_sample_1"),
                                                       ("zeta", "level_1_problem_1_sample_2")]
    assert m[1]["conversion_error"] and not m[0]["conversion_error"] and m[0]["correct"] is False
    items = discover(tmp_path / "run", kernelbench=str(tmp_path / "problems"))
    assert [it["id"] for it in items] == ["level_1_problem_1_sample_0", "level_1_problem_1_sample_2"]
    assert all(it["reference"] == REF and S.TEMPLATE_MARK in it["candidate"] for it in items)
    assert (tmp_path / "problems" / "level1" / "1_Tiny.py").is_file()
    assert S.materialise_kb_layout(rows, tmp_path / "again") == m
