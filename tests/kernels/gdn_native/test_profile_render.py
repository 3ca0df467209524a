"""The backward kernel-profile table: rendered from the committed results/native/profile/<call>/ exactly as
committed, one line per profiled row, every row that did not run named in the caption."""

import json
from pathlib import Path

import pytest

from kernels.gdn.native.render import PROFILE_HEADER, _short_kernel, profile_table

ROOT = Path(__file__).resolve().parents[3]
PROF = ROOT / "results" / "native" / "profile"


def _calls():
    return [(d.name, json.loads((d / "profile.json").read_text()), json.loads((d / "provenance.json").read_text()))
            for d in sorted(PROF.iterdir()) if (d / "profile.json").exists()]


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
    body = [line for line in md.splitlines() if line.startswith("| call") and not line.startswith("| call |")]
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
