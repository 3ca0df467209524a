"""experiments/mamba/positive_control.py: its pairs exist (C7 is the GDN pair, not a copy) and its refusals."""

from experiments.mamba import positive_control as pc


def test_pairs_are_c1_to_c7_with_the_gdn_pair_as_c7():
    assert list(pc.PAIRS) == [f"C{i}" for i in range(1, 8)]
    assert pc.PAIRS["C7"] == pc.ROOT / "data" / "positive_control" / "pc_gdn_chunked"
    for d in pc.PAIRS.values():
        assert (d / "ref.py").is_file() and (d / "cand.py").is_file()


def test_unknown_profile_is_refused(tmp_path, capsys):
    assert pc.main(["--device", "cpu", "--profiles", "strict,lenient", "--json", str(tmp_path / "x.json")]) == 2
    assert "lenient" in capsys.readouterr().err and not (tmp_path / "x.json").exists()


def test_cuda_refuses_kernels_from_another_checkout(tmp_path, monkeypatch):
    monkeypatch.setattr(pc, "installed_kernels_are_this_checkout", lambda: False)
    assert pc.main(["--device", "cuda", "--json", str(tmp_path / "x.json")]) == 2
