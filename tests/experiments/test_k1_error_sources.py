"""experiments/native/k1_error_sources.py on a short sequence: the replay finds the dominant bf16 roundings of K1
(P for d delta, Qg for dS0) and the hi/lo pairs remove most of both."""

import importlib


def test_error_sources_on_a_short_sequence():
    mod = importlib.import_module("experiments.native.k1_error_sources")
    rows = {(r["member"], r["case"]): r for r in mod.main(["--members", "kda", "--T", "256"])}
    base = rows[("kda", "all rounded")]
    assert 1e-4 < base["dd_rel_vs_exact"] < 1e-2  # bf16-sized, not zero, not wrong
    assert rows[("kda", "P exact")]["dd_rel_vs_exact"] < 0.7 * base["dd_rel_vs_exact"]
    assert rows[("kda", "Qg exact")]["dS0_rel_vs_exact"] < 0.5 * base["dS0_rel_vs_exact"]
    pair = rows[("kda", "P, Qg as hi/lo pairs")]
    assert pair["dd_rel_vs_exact"] < 0.7 * base["dd_rel_vs_exact"]
    assert pair["dS0_rel_vs_exact"] < 0.5 * base["dS0_rel_vs_exact"]
