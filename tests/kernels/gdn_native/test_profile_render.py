"""The backward kernel-profile table: rendered from the current result (results/native/profile/profile.json, its
runs) exactly as committed, one line per profiled row, every row that did not run named in the caption."""

from pathlib import Path

import pytest
from lethe.kernels.gdn.native.render import PROFILE_HEADER, _short_kernel, profile_table

from lethe.results import load_runs

ROOT = Path(__file__).resolve().parents[3]
PROF = ROOT / "results" / "native" / "profile"


def _calls():
    return load_runs(PROF / "profile.json")


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


def test_versus_fla_table_never_mixes_calls_and_divides_their_medians():
    from lethe.kernels.gdn.native.render import (
        FIGURE_MIN_CELLS,
        GENERAL_SGDN,
        figure_versus_fla_call,
        member_label,
        versus_fla_calls,
        versus_fla_table,
    )

    if not PROF.exists():
        pytest.skip("no profile results committed")
    calls = _calls()
    found = versus_fla_calls(calls)
    assert found
    # newest first, in the order the calls were given
    order = [n for n, _, _ in calls]
    assert [n for n, _ in found] == sorted((n for n, _ in found), key=order.index, reverse=True)
    expected_lines = []
    for name, cells in found:
        doc = next(d for n, d, _ in calls if n == name)
        # every cell holds hybrid-tc and fla rows of that one call, and nothing that did not run
        for (member, V, T, BH), got in cells.items():
            assert {"hybrid-tc", "fla"} <= set(got)
            # a cell is named after what hybrid-tc ran (member_label: sgdn on the general kernels before the
            # scalar-gate path)
            assert member == member_label(got["hybrid-tc"])
            for r in got.values():
                assert r in doc["rows"] and r["status"] == "ok" and "@" not in r["impl"]
                assert (r["member"], r["V"], r["T"], r["B"] * r["H"]) == (got["hybrid-tc"]["member"], V, T, BH)
            expected_lines.append((name, got["fla"]["bwd_wall_ms"] / got["hybrid-tc"]["bwd_wall_ms"]))
    md, tex = versus_fla_table(calls)
    lines = [ln for ln in md.splitlines() if ln.startswith("| ") and not ln.startswith("| call |")]
    assert len(lines) == len(expected_lines)
    for ln, (name, ratio) in zip(lines, expected_lines, strict=True):
        assert ln.startswith(f"| {name} |") and f"{ratio:.2f}x" in ln
    # the figure: the newest commit whose calls hold enough cells together (found is newest first), else the
    # widest call; every cell is one call's, the newest of that commit's where it repeats
    fig_name, fig_cells = figure_versus_fla_call(calls)
    sha = {n: p.get("git_sha") for n, _, p in calls}
    # the figure leaves out the cells that no longer describe the code (sgdn on the general kernels)
    current = [(n, {k: v for k, v in c.items() if k[0] != GENERAL_SGDN}) for n, c in found]
    current = [(n, c) for n, c in current if c]
    assert not any(k[0] == GENERAL_SGDN for k in fig_cells)
    by_commit: dict = {}
    for name, cells in current:
        by_commit.setdefault(sha[name], []).append((name, cells))
    enough = [g for g in by_commit.values() if len({k for _, c in g for k in c}) >= FIGURE_MIN_CELLS]
    if enough:
        assert fig_name.split("+") == [n for n, _ in reversed(enough[0])]
        for key, got in fig_cells.items():
            assert got == next(c[key] for _, c in enough[0] if key in c)
        assert set(fig_cells) == {k for _, c in enough[0] for k in c}
    else:
        assert (fig_name, fig_cells) == max(current, key=lambda nc: len(nc[1]))
    table = ROOT / "paper" / "tables" / "native_vs_fla.md"
    if table.exists():
        assert md == table.read_text() and tex == table.with_suffix(".tex").read_text()
    # calls without hybrid-tc and fla side by side render nothing
    assert versus_fla_table([(n, {"rows": [r for r in d["rows"] if r["impl"] != "fla"]}, p)
                             for n, d, p in calls]) == ("", "")


def test_sgdn_rows_say_which_kernels_they_timed():
    from lethe.kernels.gdn.native.render import GENERAL_SGDN, member_label

    old = {"member": "sgdn", "impl": "hybrid-tc", "fwd_options": {"dot_precision": "tf32x3"}}
    assert member_label(old) == GENERAL_SGDN
    assert member_label({**old, "fwd_options": {"gate_form": "auto"}}) == "sgdn"
    assert member_label({**old, "impl": "fla", "fwd_options": {}}) == "sgdn"
    assert member_label({**old, "member": "gdn"}) == "gdn"
