"""The battery's names live in one torch-free module; the modules that import torch re-export them."""

import subprocess
import sys

from lethe.verifier import battery, gates, probes, records


def test_gates_and_probes_re_export_the_battery_names():
    assert gates.GATE_IDS is battery.GATE_IDS and len(battery.GATE_IDS) == 12
    assert probes.PLAN_VERSION is battery.PLAN_VERSION and probes.REF_RESULT_MB == battery.REF_RESULT_MB
    assert [f.name for f in records.ARROW_SCHEMA.field("gates").type] == list(battery.GATE_IDS)


def test_the_light_modules_do_not_import_torch():
    """What a one-shot ``lethe verify`` process imports (names, sources, rows, the api, the verdict) leaves torch
    to the sandboxed processes."""
    code = ("import sys; import lethe.verifier.battery, lethe.verifier.sources, lethe.verifier.records, "
            "lethe.verifier.api, lethe.verifier.verdict, lethe.verifier.report, lethe.verifier.refcache; "
            "print(sorted(m for m in ('torch', 'triton') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
