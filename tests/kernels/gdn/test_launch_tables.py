"""lethe.kernels.gdn.launch_tables: lookups and temporary overrides of the wrappers' launch tables."""

import pytest
from lethe.kernels.gdn.launch_tables import find_table, overridden, table_for
from lethe.kernels.gdn.triton_bwd import BWD_LAUNCH
from lethe.kernels.gdn.triton_fwd import FWD_LAUNCH


def test_lookup_finds_each_table_and_refuses_unknown_kernels():
    assert table_for("output_fwd_kernel") is FWD_LAUNCH and table_for("intra_bwd_kernel") is BWD_LAUNCH
    assert find_table("no_such_kernel") is None
    with pytest.raises(KeyError, match="no_such_kernel"):
        table_for("no_such_kernel")


def test_a_scalar_gate_launch_of_a_general_kernel_names_its_own_entry():
    """The scalar-gate path launches the general scan and output kernels with SCALAR_GATE and its own SG_LAUNCH
    entries: entry_name tells the two variants' launches apart, so a report or an override by name reaches the
    variant it names."""
    from lethe.kernels.gdn.launch_tables import entry_name
    from lethe.kernels.gdn.scalar_gate import SG_LAUNCH, SG_VARIANTS

    assert entry_name("state_fwd_kernel", {"SCALAR_GATE": True, "BV": 64}) == "sg_state_fwd_kernel"
    assert entry_name("output_fwd_kernel", {"SCALAR_GATE": True}) == "sg_output_kernel"
    assert entry_name("state_fwd_kernel", {"BV": 32}) == "state_fwd_kernel"
    assert entry_name("output_fwd_kernel", {"SCALAR_GATE": False}) == "output_fwd_kernel"
    for entry, kernel in SG_VARIANTS.items():
        assert table_for(entry) is SG_LAUNCH and table_for(kernel) is FWD_LAUNCH
    with pytest.raises(KeyError, match="intra_bwd_kernel"):
        entry_name("intra_bwd_kernel", {"SCALAR_GATE": True})


def test_override_applies_and_restores_even_on_error():
    before_f, before_b = dict(FWD_LAUNCH["wy_fwd_kernel"]), dict(BWD_LAUNCH["intra_bwd_kernel"])
    with overridden({"wy_fwd_kernel": {"num_warps": 2}}) as entries:
        cfg = entries["wy_fwd_kernel"]
        assert FWD_LAUNCH["wy_fwd_kernel"]["num_warps"] == 2 and cfg["num_stages"] == before_f["num_stages"]
    with pytest.raises(RuntimeError), overridden({"intra_bwd_kernel": {"BV": 64}, "wy_fwd_kernel": {"num_warps": 1},
                                                   "no_such_kernel": {"BV": 8}}) as entries:
        assert BWD_LAUNCH["intra_bwd_kernel"]["BV"] == 64 and FWD_LAUNCH["wy_fwd_kernel"]["num_warps"] == 1
        assert "no_such_kernel" not in entries
        raise RuntimeError("boom")
    assert FWD_LAUNCH["wy_fwd_kernel"] == before_f and BWD_LAUNCH["intra_bwd_kernel"] == before_b


def test_parse_overrides_reads_ints_none_and_words_and_refuses_malformed_items():
    from lethe.kernels.gdn.launch_tables import parse_overrides

    got = parse_overrides(["state_fwd_kernel:PREC=tf32rn,BV=64", "output_fwd_kernel:DIRECT=1", "wy_a_kernel:PREC=None"])
    assert got == {"state_fwd_kernel": {"PREC": "tf32rn", "BV": 64}, "output_fwd_kernel": {"DIRECT": 1},
                   "wy_a_kernel": {"PREC": None}}
    for bad in ("state_fwd_kernel", "state_fwd_kernel:BV", ":BV=1", "state_fwd_kernel:=1"):
        with pytest.raises(ValueError):
            parse_overrides([bad])


def test_check_overrides_refuses_unknown_kernels_and_keys():
    from lethe.kernels.gdn.launch_tables import check_overrides

    check_overrides({"state_fwd_kernel": {"PREC": "tf32rn", "KEND": 0}, "intra_bwd_kernel": {"BV": 16}})
    with pytest.raises(KeyError, match="no_such_kernel"):
        check_overrides({"no_such_kernel": {"BV": 8}})
    with pytest.raises(KeyError, match="PRECISION"):  # a misspelt key would silently change nothing
        check_overrides({"state_fwd_kernel": {"PRECISION": "tf32rn"}})


def test_overrides_from_cli_parses_checks_and_names_the_option():
    from lethe.kernels.gdn.launch_tables import overrides_from_cli

    assert overrides_from_cli(["state_fwd_kernel:PREC=tf32x3"]) == {"state_fwd_kernel": {"PREC": "tf32x3"}}
    assert overrides_from_cli([]) == {}
    for bad in (["state_fwd_kernel:PRECC=tf32x3"], ["no_such_kernel:BV=16"], ["state_fwd_kernel"]):
        with pytest.raises(SystemExit, match="^--launch: "):
            overrides_from_cli(bad)
