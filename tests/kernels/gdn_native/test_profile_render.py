"""The backward kernel-profile table: rendered from the committed results/native/profile/<call>/ exactly as
committed, one line per profiled row, every row that did not run named in the caption."""

from pathlib import Path

import pytest

from kernels.gdn.native.render import PROFILE_HEADER, _short_kernel, load_profile_calls, profile_table

ROOT = Path(__file__).resolve().parents[3]
PROF = ROOT / "results" / "native" / "profile"


def _calls():
    return load_profile_calls(sorted(d / "profile.json" for d in PROF.iterdir() if (d / "profile.json").exists()))


def test_short_kernel_names():
    assert _short_kernel("kernel_cutlass_kernel_kernelsgdnnativek1_hopperK1ReverseScan_object_at_") == "CuTe K1ReverseScan"
    assert _short_kernel("void at::native::elementwise_kernel<128, 2, f>(int, f)") == "elementwise_kernel"
    assert _short_kernel("chunk_gdn2_bwd_kernel_intra") == "chunk_gdn2_bwd_kernel_intra"


def test_committed_profile_table_renders_as_committed():
    if not PROF.exists():
        pytest.skip("no profile results committed")
    calls = _calls()
    md, tex = profile_table(calls)
    ok = [r for _, d, _ in calls for r in d["rows"] if r.get("status") == "ok"]
    first = md.split("\n\n")[0]  # the backward table; the forward table follows its caption
    body = [line for line in first.splitlines() if line.startswith("| call") and not line.startswith("| call |")]
    assert len(body) == len(ok) and len(md.splitlines()[0].split("|")) - 2 == len(PROFILE_HEADER)
    for _, d, _ in calls:
        for r in d["rows"]:
            if r.get("status") != "ok":
                assert f"{r['impl']} at {r['member']} d_v={r['V']} T={r['T']} B={r['B']}" in md
            else:  # the summed kernel time never exceeds what the families add up to
                fam = sum(v["ms"] for v in r["profile"]["families"].values())
                assert fam == pytest.approx(r["profile"]["kernel_sum_ms"], abs=1e-3)
    table = ROOT / "paper" / "tables" / "native_profile.md"
    if table.exists():
        assert md == table.read_text() and tex == table.with_suffix(".tex").read_text()


def test_versus_fla_table_comes_from_one_call_and_divides_its_medians():
    from kernels.gdn.native.render import versus_fla_call, versus_fla_table

    if not PROF.exists():
        pytest.skip("no profile results committed")
    calls = _calls()
    name, cells = versus_fla_call(calls)
    assert name is not None and cells
    doc = next(d for n, d, _ in calls if n == name)
    # every cell holds hybrid-tc and fla rows of that one call, and nothing that did not run
    for (member, V, T, BH), got in cells.items():
        assert {"hybrid-tc", "fla"} <= set(got)
        for r in got.values():
            assert r in doc["rows"] and r["status"] == "ok"
            assert (r["member"], r["V"], r["T"], r["B"] * r["H"]) == (member, V, T, BH)
    md, tex = versus_fla_table(calls)
    lines = [ln for ln in md.splitlines() if ln.startswith("| ") and not ln.startswith("| member")]
    assert len(lines) == len(cells)
    for ln, got in zip(lines, cells.values(), strict=True):
        ratio = got["fla"]["bwd_wall_ms"] / got["hybrid-tc"]["bwd_wall_ms"]
        assert f"{ratio:.2f}x" in ln
    table = ROOT / "paper" / "tables" / "native_vs_fla.md"
    if table.exists():
        assert md == table.read_text() and tex == table.with_suffix(".tex").read_text()
    # a call without hybrid-tc and fla side by side renders nothing
    assert versus_fla_table([(n, {"rows": [r for r in d["rows"] if r["impl"] != "fla"]}, p)
                             for n, d, p in calls]) == ("", "")
