"""The stable contract: the typed Verdict, `lethe verify --json` against its shipped JSON Schema, exit codes, the
human summary's margins and grouping, and the CLI's version, gate filter and row ids."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

import lethe
from lethe import cli
from lethe.verifier import fixtures as K
from lethe.verifier import records
from lethe.verifier import verdict as V


def test_json_output_follows_the_shipped_schema(files, local_sandbox, capsys):
    schema = V.output_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    cases = [(K.SOFTMAX_REF, K.as_candidate(K.SOFTMAX_REF), 0), (K.SCALE_REF, K.SCALE_FTZ, 1),
             (K.SUM_REF, K.SUM_HALF_ACC, 1)]
    for i, (ref_src, cand_src, code) in enumerate(cases):
        ref, cand = files(f"r{i}.py", ref_src), files(f"c{i}.py", cand_src)
        assert cli.main(["verify", ref, cand, "--device", "cpu", "--json"]) == code
        out = json.loads(capsys.readouterr().out)
        jsonschema.validate(out, schema)
        assert out["schema"] == V.VERIFY_OUTPUT_SCHEMA and out["lethe_version"] == lethe.__version__
        assert out["exit_code"] == code
        # A CPU verification computes its reference on the CPU, and says so.
        assert out["reference_device"] == "cpu" and out["reference_fallback"] is None


RED_TEAM = Path(__file__).resolve().parents[2] / "data" / "red_team"


def test_json_groups_one_narrow_accumulator_into_one_cause(local_sandbox, capsys):
    """A red-team row sum kept in an fp16 running total fails many gates on one defect: `--json` names one cause,
    `narrow_accumulator`, covering every failing gate, the same list as `reward()["causes"]`."""
    d = RED_TEAM / "ord03_sequential_rowsum"
    assert cli.main(["verify", str(d / "ref.py"), str(d / "cand.py"), "--device", "cpu", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    jsonschema.validate(out, V.output_schema())
    assert len(out["failed_gates"]) >= 5 and {"PRC-02", "ORD-01", "ORD-03"} <= set(out["failed_gates"])
    (cause,) = out["causes"]
    assert cause["cause"] == "narrow_accumulator" and cause["gates"] == sorted(out["failed_gates"])
    assert set(cause["probes"]) == set(out["by_probe"])
    assert cause["worst_margin"] == max(out["gates"][g]["margin"] for g in out["failed_gates"]
                                        if out["gates"][g]["margin"] is not None) > 1
    assert "wrong_values" in cause["explains"]
    v = lethe.verify_files(str(d / "ref.py"), str(d / "cand.py"), device="cpu")
    assert json.loads(json.dumps(v.reward()["causes"])) == out["causes"]


def test_schema_names_every_cause_the_grouping_can_give():
    from lethe.verifier import causes as C

    cause = V.output_schema()["$defs"]["cause"]["properties"]
    ids = set(C.CAUSE_WORDS) | {"unexplained"}
    assert set(cause["cause"]["anyOf"][0]["enum"]) == ids == set(cause["explains"]["items"]["enum"])
    assert V.VERIFY_OUTPUT_SCHEMA == V.output_schema()["properties"]["schema"]["const"]
    ungraded = V.Verdict.from_row(records.make_row(id="k", status="compile_fail", error="SyntaxError")).to_json()
    jsonschema.validate(ungraded, V.output_schema())
    assert [c["cause"] for c in ungraded["causes"]] == ["row_compile_fail"]


def test_python_api_returns_a_typed_verdict(local_sandbox):
    v = lethe.verify(K.SCALE_REF, K.SCALE_FTZ, device="cpu")
    assert isinstance(v, lethe.Verdict) and not v.passed and "EXC-02" in v.failed_gates
    g = v.gates["EXC-02"]
    assert g.status == "fail" and g.margin is not None and g.margin > 1 and g.failing_probes
    reward = v.reward()
    assert reward["passed"] is False and reward["gates"]["EXC-02"] is False and reward["margins"]["EXC-02"] > 1
    assert all(pid in reward["why"] for pid in g.failing_probes)
    ok = lethe.verify(K.SOFTMAX_REF, K.as_candidate(K.SOFTMAX_REF), device="cpu")
    assert ok.passed and ok.exit_code == V.EXIT_PASS and ok.by_probe() == {}
    assert all(m is None or m <= 1 for m in ok.reward()["margins"].values())


@pytest.mark.parametrize("status,error,code", [("ref_broken", "x", V.EXIT_NOT_AUDITABLE),
                                               ("not_auditable", "x", V.EXIT_NOT_AUDITABLE),
                                               ("compile_fail", "x", V.EXIT_VIOLATION),
                                               ("timeout", "x", V.EXIT_VIOLATION),
                                               ("crash", "sandbox harness error: isolation required", V.EXIT_HARNESS)])
def test_exit_codes_by_row_status(status, error, code):
    row = records.make_row(status=status, error=error, id="k")
    assert V.Verdict.from_row(row).exit_code == code


def test_probe_names_are_explained():
    assert "draw 0" in V.describe_probe("rand0")
    assert "batch_size set to 17" in V.describe_probe("shape_batch_size=17")
    assert "+B" in V.describe_probe("cancel") and "fp16" in V.describe_probe("acc_fp16_dim")
    assert V.describe_probe("unknown_probe") == "unknown_probe"


def test_human_summary_gives_margins_groups_and_a_replay_command(files, local_sandbox, tmp_path, capsys):
    ref, cand = files("r.py", K.SUM_REF), files("c.py", K.SUM_HALF_ACC)
    rows = str(tmp_path / "rows.parquet")
    assert cli.main(["verify", ref, cand, "--device", "cpu", "--out", rows]) == 1
    text = capsys.readouterr().out
    assert "err/tol" in text and "failures by probe" in text and "isolation:" in text
    replay = next(line for line in text.splitlines() if line.startswith("replay: "))[len("replay: "):]
    argv = replay.split()[1:]
    assert argv[0] == "replay" and argv[1] == rows
    # The printed command works as printed.
    assert cli.main(argv) == 0, capsys.readouterr()
    assert "reproduces" in capsys.readouterr().out


def test_version_gates_and_unique_default_ids(files, local_sandbox, tmp_path, capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"lethe {lethe.__version__}"
    ref = files("r.py", K.SOFTMAX_REF)
    assert cli.main(["verify", ref, ref, "--gates", "CMP-01,NOPE-9"]) == V.EXIT_USAGE
    assert "NOPE-9" in capsys.readouterr().err
    a = tmp_path / "a"
    b = tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "cand.py").write_text(K.as_candidate(K.SOFTMAX_REF))
    (b / "cand.py").write_text(K.as_candidate(K.SOFTMAX_REF) + "\n# another kernel\n")
    rows = str(tmp_path / "rows.parquet")
    for d in (a, b):
        assert cli.main(["verify", ref, str(d / "cand.py"), "--device", "cpu", "--gates", "CMP-01", "--json",
                         "--out", rows, "--append"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert [g for g, v in out["gates"].items() if v["status"] != "na"] == ["CMP-01"]
    ids = [r["id"] for r in records.read_rows(rows)]
    assert len(set(ids)) == 2 and all(i.startswith("cand-") for i in ids)
