"""The trusted corpus builder: a fixed problem order, the size census, the budget and the member list."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from lethe.trusted import corpus as C

KB = C.kb_levels_root(C.DEFAULT_KB_ROOT)
needs_kb = pytest.mark.skipif(not (KB / "level1").is_dir(), reason="KernelBench checkout not beside the worktree")

MATMUL = textwrap.dedent('''
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def forward(self, a, b):
            return a @ b

    M = {m}
    def get_inputs():
        return [torch.randn(M, 32), torch.randn(32, 16)]

    def get_init_inputs():
        return []
''')

SCALE = textwrap.dedent('''
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self, s):
            super().__init__()
            self.s = s

        def forward(self, x):
            return x * self.s

    def get_inputs():
        return [torch.randn({n})]

    def get_init_inputs():
        return [2.0]
''')


def _fake_kb(tmp_path: Path) -> Path:
    root = tmp_path / "kb"
    (root / "level1").mkdir(parents=True)
    (root / "level2").mkdir()
    (root / "level1" / "10_Scale.py").write_text(SCALE.format(n=5))
    (root / "level1" / "2_Matmul.py").write_text(MATMUL.format(m=64))
    (root / "level1" / "3_BigScale.py").write_text(SCALE.format(n=10_000))
    (root / "level1" / "notes.txt").write_text("not a problem")
    (root / "level2" / "1_Scale.py").write_text(SCALE.format(n=3))
    return root


def _hand(tmp_path: Path, problem: str) -> Path:
    d = tmp_path / "hand"
    d.mkdir(exist_ok=True)
    (d / "scale_twice.py").write_text(textwrap.dedent(f'''
        """Scaling written as two additions."""
        import torch.nn as nn

        PROBLEM = "{problem}"

        class ModelNew(nn.Module):
            def __init__(self, s):
                super().__init__()
                self.s = s

            def forward(self, x):
                return x + x
    '''))
    return d


def test_list_problems_is_ordered_by_level_then_number(tmp_path):
    root = _fake_kb(tmp_path)
    got = [p["problem"] for p in C.list_problems(root, (1, 2))]
    assert got == ["level1/2_Matmul.py", "level1/3_BigScale.py", "level1/10_Scale.py", "level2/1_Scale.py"]
    assert C.list_problems(root, (1, 2)) == C.list_problems(root, (1, 2))


@needs_kb
def test_kernelbench_listing_is_complete_and_deterministic():
    first = C.list_problems(C.DEFAULT_KB_ROOT)
    assert first == C.list_problems(C.DEFAULT_KB_ROOT)
    counts = {lvl: sum(1 for p in first if p["level"] == lvl) for lvl in (1, 2, 3)}
    assert counts == {1: 100, 2: 100, 3: 50}
    assert len({p["problem"] for p in first}) == len(first)
    assert [p["number"] for p in first if p["level"] == 1] == list(range(1, 101))


def test_problem_id():
    assert C.problem_id("level1/23_Softmax.py") == "L1/23_Softmax"
    assert C.problem_id("level3/1_MLP.py") == "L3/1_MLP"


def test_self_candidate_is_the_reference_model():
    ns = {}
    exec(C.self_candidate(SCALE.format(n=4)), ns)
    assert ns["ModelNew"] is ns["Model"]


def test_census_counts_elements_and_matmul_flops_without_computing():
    c = C.census(MATMUL.format(m=64))
    assert c["error"] == ""
    assert c["input_numel"] == 64 * 32 + 32 * 16
    assert c["output_numel"] == 64 * 16
    assert c["flops"] == 2 * 64 * 32 * 16
    assert c["param_numel"] == 0


def test_census_records_an_untraceable_problem():
    src = SCALE.format(n=4).replace("return x * self.s", "return x * float(x.sum().item())")
    c = C.census(src)
    assert c["input_numel"] == 4 and c["output_numel"] is None and "item" in c["error"].lower()


def test_budget_reason():
    b = C.Budget(max_numel=100, max_flops=1000)
    assert C.budget_reason({"input_numel": 50, "output_numel": 50, "flops": 1000}, b) == ""
    assert "elements" in C.budget_reason({"input_numel": 60, "output_numel": 41, "flops": 0}, b)
    assert "FLOPs" in C.budget_reason({"input_numel": 1, "output_numel": 1, "flops": 1001}, b)
    assert "not traceable" in C.budget_reason({"input_numel": None, "error": "boom"}, b)


def test_build_orders_by_level_then_size_and_records_exclusions(tmp_path):
    root = _fake_kb(tmp_path)
    hand = _hand(tmp_path, "level1/10_Scale.py")
    corpus = C.build(root, levels=(1, 2), budget=C.Budget(max_numel=4096, max_flops=1e9), hand_dir=hand)
    ids = [m["id"] for m in corpus["members"]]
    assert ids == ["L1/10_Scale", "L1/10_Scale:scale_twice", "L1/2_Matmul", "L1/3_BigScale", "L2/1_Scale"]
    big = next(m for m in corpus["members"] if m["id"] == "L1/3_BigScale")
    assert "20,000 elements" in big["excluded"]
    assert [it["id"] for it in corpus["items"]] == [i for i in ids if i != "L1/3_BigScale"]
    hand_item = next(it for it in corpus["items"] if it["id"].endswith("scale_twice"))
    assert "x + x" in hand_item["candidate"] and "get_inputs" not in hand_item["candidate"]
    assert hand_item["reference"] == (root / "level1" / "10_Scale.py").read_text()
    man = C.manifest(corpus)
    assert all("candidate" not in m and "reference" not in m for m in man["members"])
    assert [m["id"] for m in man["members"]] == ids


def test_census_cache_is_reused_only_for_an_unchanged_file(tmp_path, monkeypatch):
    import json

    root = _fake_kb(tmp_path)
    corpus = C.build(root, levels=(1,), hand_dir=tmp_path / "none")
    cache = tmp_path / "corpus.json"
    man = C.manifest(corpus)
    for m in man["members"]:
        m["census"] = {**m["census"], "input_numel": 7}  # a marker the real census never gives here
    cache.write_text(json.dumps(man))
    (root / "level1" / "2_Matmul.py").write_text(MATMUL.format(m=8))
    again = C.build(root, levels=(1,), hand_dir=tmp_path / "none", census_cache=cache)
    by_id = {m["id"]: m["census"]["input_numel"] for m in again["members"]}
    assert by_id["L1/10_Scale"] == 7 and by_id["L1/3_BigScale"] == 7
    assert by_id["L1/2_Matmul"] == 8 * 32 + 32 * 16


def test_hand_kernel_naming_an_unknown_problem_is_an_error(tmp_path):
    root = _fake_kb(tmp_path)
    with pytest.raises(ValueError, match="not a KernelBench problem"):
        C.build(root, levels=(1,), hand_dir=_hand(tmp_path, "level1/99_Nope.py"))


@needs_kb
def test_committed_hand_kernels_name_real_problems_that_fit_the_default_budget():
    hands = C.hand_kernels()
    assert len(hands) >= 20
    problems = {p["problem"]: p for p in C.list_problems(C.DEFAULT_KB_ROOT)}
    for h in hands:
        assert h["problem"] in problems, h["name"]
        assert h["summary"], f"{h['name']} has no docstring"
        c = C.census((KB / h["problem"]).read_text())
        assert C.budget_reason(c, C.Budget()) == "", (h["name"], c)
    assert sum(h["triton"] for h in hands) >= 4
