"""Tables of C1's launch tuning (lethe.render.mamba_launch): our search's table from a result document, the
authors' records summarised as theirs."""

import json
import math
from pathlib import Path

from lethe.kernels.mamba.tuning import DEFAULT_CONFIG, LaunchConfig
from lethe.render import mamba_launch

ROOT = Path(__file__).resolve().parents[2]
PUB = ROOT / "data" / "published"


def _doc(complete=True):
    cp = LaunchConfig("chunk_parallel", 256)
    rows = []
    for shape, t_cp in (((1, 16384, 1024, 16), 0.2), ((8, 512, 4096, 16), 2.0), ((2, 8192, 1024, 16), 0.25)):
        s = dict(zip(("batch", "seq_len", "d_model", "n_state"), shape, strict=True))
        rows.append({"shape": s, "config": DEFAULT_CONFIG.as_dict(), "status": "ok", "median_ms": 1.0})
        rows.append({"shape": s, "config": cp.as_dict(), "status": "ok", "median_ms": t_cp})
    rows.append({"shape": rows[0]["shape"], "config": LaunchConfig("serial", 64, 8).as_dict(), "status": "mismatch",
                 "reason": "synthetic"})
    return {"device": "test GPU", "sm_count": 132, "space": [1, 2, 3], "grid": [1, 2, 3], "rows": rows,
            "complete": complete, "stopped": None if complete else "--max-s 1 reached"}


def test_launch_search_table_has_each_shape_the_mean_and_the_dropped_rows(tmp_path):
    md, tex = tmp_path / "t.md", tmp_path / "t.tex"
    mamba_launch.render_launch_search(_doc(False), {"torch": "x", "triton": "y"}, md, tex)
    text = md.read_text()
    assert "geometric mean" in text and "1 mismatch" in text and "stopped early" in text
    rows, res = mamba_launch.launch_search_rows(_doc())
    assert len(rows) == 4
    assert math.isclose(res["geomean"]["oracle"], (5 * 1 * 4) ** (1 / 3))


def test_boundary_summary_is_the_shape_gated_geomean():
    recs = [{"op": "a", "winner": "chunk_parallel", "best_chunk_parallel": {"speedup": 4.0}},
            {"op": "a", "winner": "serial", "best_chunk_parallel": {"speedup": 0.5}},
            {"op": "a", "winner": "skipped", "reason": "oom_cap"}]
    (a, total) = mamba_launch.boundary_summary(recs)
    assert a["op"] == "a" and a["shapes"] == 2 and a["skipped"] == 1 and a["cp_wins"] == 1
    assert math.isclose(a["gated"], 2.0) and a["max_cp"] == 4.0 and total["op"] == "all ops"


def test_published_tables_match_the_committed_ones_byte_for_byte(tmp_path):
    read = lambda n: json.loads((PUB / n).read_text())
    mamba_launch.render_published_scan_mode(read("scan_mode_boundary.json"), tmp_path / "scan_mode_published.md",
                                            tmp_path / "scan_mode_published.tex")
    mamba_launch.render_published_launch(read("e2_cost_model.json"), tmp_path / "launch_published.md",
                                         tmp_path / "launch_published.tex")
    mamba_launch.render_published_rl(read("scan_mode_config_rl.json"), read("e2_serial_seed.json"),
                                     read("edit_rl_negative.json"), tmp_path / "rl_published.md",
                                     tmp_path / "rl_published.tex")
    for f in sorted(tmp_path.iterdir()):
        assert f.read_bytes() == (ROOT / "paper" / "tables" / f"mamba_{f.name}").read_bytes(), f.name
