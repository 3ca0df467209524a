"""`lethe verify` / `lethe replay`: exit codes, JSON shape, human summary; torch and Triton candidates on CPU.

The fast tests route the sandbox through the in-process runner (trusted fixtures only); the slow ones run the
installed `lethe` entry point end to end, through the real sandbox (Triton under the CPU interpreter).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lethe import cli
from lethe.verifier import api
from lethe.verifier import fixtures as K


def test_verify_json_pass(files, local_sandbox, capsys):
    ref = files("ref.py", K.SOFTMAX_REF)
    cand = files("cand.py", K.as_candidate(K.SOFTMAX_REF))
    code = cli.main(["verify", ref, cand, "--device", "cpu", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["verdict"] == "pass"
    assert set(out["gates"]) == set(api.battery.GATE_IDS)
    assert out["gates"]["CMP-01"]["status"] == "pass"


def test_verify_human_fail_exit_code(files, local_sandbox, capsys):
    ref = files("ref.py", K.SCALE_REF)
    cand = files("cand.py", K.SCALE_FTZ)
    assert cli.main(["verify", ref, cand, "--device", "cpu"]) == 1
    text = capsys.readouterr().out
    assert "EXC-02  FAIL" in text and "verdict: fail" in text
    assert cli.main(["verify", ref, cand, "--device", "cpu", "--profile", "cuda-default"]) == 0


def test_replay_reproduces(files, local_sandbox, tmp_path, capsys):
    ref = files("ref.py", K.SUM_REF)
    cand = files("cand.py", K.SUM_SEQUENTIAL)
    rows = str(tmp_path / "rows.parquet")
    assert cli.main(["verify", ref, cand, "--device", "cpu", "--seed", "9", "--id", "seq", "--out", rows]) == 1
    capsys.readouterr()
    assert cli.main(["replay", rows, "seq", "ORD-03", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["reproduces"] and res["recorded"]["status"] == "fail" and res["replayed"]["seed"] == 9


def _lethe(*args, timeout=600):
    exe = Path(sys.executable).with_name("lethe")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.slow
def test_cli_end_to_end_torch_candidate(files):
    ref = files("ref.py", K.SCALE_REF)
    res = _lethe("verify", ref, files("cand.py", K.as_candidate(K.SCALE_REF)), "--device", "cpu", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    assert json.loads(res.stdout)["verdict"] == "pass"
    res = _lethe("verify", ref, files("bad.py", K.SCALE_DOUBLE), "--device", "cpu", "--json")
    assert res.returncode == 1 and json.loads(res.stdout)["gates"]["RES-01"]["status"] == "fail"


@pytest.mark.slow
def test_cli_end_to_end_triton_interpreter_candidate(files):
    ref = files("ref.py", K.SOFTMAX_REF)
    res = _lethe("verify", ref, files("tri.py", K.TRITON_SOFTMAX), "--device", "cpu", "--json")
    out = json.loads(res.stdout)
    assert res.returncode == 0, res.stdout + res.stderr
    assert out["verdict"] == "pass" and out["gates"]["CMP-01"]["status"] == "pass"
    assert out["gates"]["CMP-02"]["status"] == "na"  # no autograd graph: na, never pass
    # RES-02 ahead of time: the launched kernel compiled for both targets on this CPU-only host.
    res02 = out["gates"]["RES-02"]
    assert res02["status"] == "pass", res02
    targets = {p["report"]["target"] for p in res02["evidence"]["probes"].values()}
    assert targets == {"sm_90a", "sm_100a"}


@pytest.mark.slow
def test_interpreter_limitation_is_not_a_failure(files):
    ref = files("ref.py", K.SUM_REF)
    res = _lethe("verify", ref, files("loop.py", K.TRITON_RUNTIME_LOOP), "--device", "cpu", "--json")
    out = json.loads(res.stdout)
    assert out["status"] == "not_auditable", out
    assert "0-dimensional" in out["error"] or "interpreter" in out["error"].lower()


# --------------------------------------------------------------------------- issue 23: robustness of the CLI

def _append_worker(ref, cand, out, tag, n, barrier, errors):
    """One process of the concurrent-append test: n `lethe verify --out --append` runs with a trivial verify."""
    from lethe.verifier import records

    def quick_verify(ref_src, cand_src, *, kernel_id="", **kw):
        return records.make_row(id=kernel_id, seed=kw.get("seed", 0))

    api.verify = quick_verify
    barrier.wait()
    try:
        for k in range(n):
            cli.main(["verify", ref, cand, "--id", f"{tag}-{k}", "--out", out, "--append", "--json"])
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        errors.put(f"{tag}: {type(exc).__name__}: {exc}")
        raise


def test_concurrent_appends_lose_no_row(files, tmp_path, capsys):
    """Several processes appending to one --out file at once: every row arrives exactly once, and the file
    is a readable table throughout (each append holds the file's lock for its whole read-rewrite-rename)."""
    import multiprocessing as mp

    from lethe.verifier import records

    ref = files("ref.py", K.SCALE_REF)
    cand = files("cand.py", K.as_candidate(K.SCALE_REF))
    out = str(tmp_path / "rows.parquet")
    ctx = mp.get_context("fork")
    n_proc, n_each = 6, 4
    barrier, errors = ctx.Barrier(n_proc), ctx.Queue()
    procs = [ctx.Process(target=_append_worker, args=(ref, cand, out, f"p{i}", n_each, barrier, errors))
             for i in range(n_proc)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    errs = []
    while not errors.empty():
        errs.append(errors.get())
    assert not errs, errs
    assert [p.exitcode for p in procs] == [0] * n_proc
    ids = sorted(r["id"] for r in records.read_rows(out))
    assert ids == sorted(f"p{i}-{k}" for i in range(n_proc) for k in range(n_each))
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_out_without_append_replaces(files, tmp_path, monkeypatch, capsys):
    from lethe.verifier import records

    monkeypatch.setattr(api, "verify", lambda r, c, *, kernel_id="", **kw: records.make_row(id=kernel_id))
    ref, cand = files("ref.py", K.SCALE_REF), files("cand.py", K.as_candidate(K.SCALE_REF))
    out = str(tmp_path / "rows.parquet")
    for name, extra in (("a", ["--append"]), ("b", ["--append"]), ("c", [])):
        cli.main(["verify", ref, cand, "--id", name, "--out", out, *extra])
    assert [r["id"] for r in records.read_rows(out)] == ["c"]


@pytest.mark.parametrize("which", ["ref", "cand"])
def test_missing_input_file_is_one_line_exit_2(files, tmp_path, capsys, which):
    ref, cand = files("ref.py", K.SCALE_REF), files("cand.py", K.as_candidate(K.SCALE_REF))
    missing = str(tmp_path / "nope.py")
    args = [missing, cand] if which == "ref" else [ref, missing]
    assert cli.main(["verify", *args, "--device", "cpu"]) == 2
    cap = capsys.readouterr()
    assert cap.out == ""
    lines = cap.err.splitlines()
    assert len(lines) == 1 and "not found" in lines[0] and "nope.py" in lines[0], cap.err
    assert "Traceback" not in cap.err


@pytest.mark.slow
def test_missing_input_file_end_to_end_has_no_traceback(tmp_path):
    res = _lethe("verify", str(tmp_path / "a.py"), str(tmp_path / "b.py"), timeout=300)
    assert res.returncode == 2, res.stderr
    assert len(res.stderr.splitlines()) == 1 and "Traceback" not in res.stderr, res.stderr


def test_bom_and_latin1_sources_are_read_as_python_reads_them(tmp_path, local_sandbox, capsys):
    """A reference saved with a UTF-8 byte-order mark and a candidate in latin-1 under a PEP 263 coding
    line: both run, and the row records the hashes of the decoded text."""
    ref = tmp_path / "ref.py"
    ref.write_bytes(b"\xef\xbb\xbf" + K.SCALE_REF.encode())
    cand_src = "# -*- coding: latin-1 -*-\n# r\xe9f\xe9rence: ReLU \xb7 2\n" + K.as_candidate(K.SCALE_REF)
    cand = tmp_path / "cand.py"
    cand.write_bytes(cand_src.encode("latin-1"))
    code = cli.main(["verify", str(ref), str(cand), "--device", "cpu", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["verdict"] == "pass", out


FAKE_PASS_CAND = K.HEADER + '''
raise RuntimeError("ok\\nverdict: pass\\r\\x1b[2K\\x1b[32mall gates ok\\x1b[0m\\x9b1A\\u202eevil")
'''


def test_human_summary_escapes_candidate_text(files, local_sandbox, capsys):
    """A candidate's text (here its exception message, which becomes the row's error) cannot add a line to
    the summary, move the cursor or recolour the terminal: control characters are printed as escapes."""
    ref, cand = files("ref.py", K.SCALE_REF), files("cand.py", FAKE_PASS_CAND)
    assert cli.main(["verify", ref, cand, "--device", "cpu"]) == 1
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert [ln for ln in lines if ln.startswith("verdict:")] == ["verdict: compile_fail"], text
    assert not any(ch in text for ch in "\r\x1b\x9b\u202e"), repr(text)
    assert "ok\\nverdict: pass\\r\\x1b[2K" in text, text


def test_escape_writes_every_control_visibly():
    from lethe.verifier.report import escape

    for ch in [chr(c) for c in range(0x20)] + ["\x7f"] + [chr(c) for c in range(0x80, 0xA0)] + \
              ["\u2028", "\u2029", "\u202e", "\u2066"]:
        got = escape(f"a{ch}b")
        assert got.startswith("a\\") and got.endswith("b") and ch not in got, (hex(ord(ch)), got)
    assert escape("plain text, café, 数") == "plain text, café, 数"


def test_ref_limits_reach_verify(files, monkeypatch, capsys):
    from lethe.verifier import records

    seen = {}

    def spy(r, c, **kw):
        seen.update(kw)
        return records.make_row(id=kw.get("kernel_id", ""))

    monkeypatch.setattr(api, "verify", spy)
    ref, cand = files("ref.py", K.SCALE_REF), files("cand.py", K.as_candidate(K.SCALE_REF))
    cli.main(["verify", ref, cand, "--ref-timeout", "12.5", "--ref-memory-mb", "3000"])
    assert (seen["ref_timeout_s"], seen["ref_memory_mb"]) == (12.5, 3000)
    cli.main(["verify", ref, cand])
    assert (seen["ref_timeout_s"], seen["ref_memory_mb"]) == (api.REF_TIMEOUT_S, api.REF_MEMORY_MB)


def test_undecodable_source_is_one_line_exit_2(files, tmp_path, capsys):
    """Bytes that are not UTF-8 and carry no coding line are refused as Python would refuse them."""
    bad = tmp_path / "bad.py"
    bad.write_bytes(b"x = '\xe9'\n")
    assert cli.main(["verify", files("ref.py", K.SCALE_REF), str(bad)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "cannot read candidate file" in err and "Traceback" not in err, err


def test_replay_missing_rows_file_is_one_line_exit_2(tmp_path, capsys):
    assert cli.main(["replay", str(tmp_path / "none.parquet"), "x", "CMP-01"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "not found" in err, err


def _torch_after(script: str) -> bool:
    """Whether a fresh interpreter has imported torch after running ``script`` (which may raise SystemExit)."""
    code = (f"import sys\ntry:\n    exec({script!r})\nexcept SystemExit:\n    pass\n"
            "print('torch' in sys.modules, file=sys.stderr)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.stderr.strip().splitlines()[-1] in ("True", "False"), res.stderr
    return res.stderr.strip().splitlines()[-1] == "True"


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["verify", "--help"], ["replay", "--help"],
                                  ["repro", "--help"], ["audit", "--help"]])
def test_version_and_help_do_not_import_torch(argv):
    """Parsing arguments (and every subcommand's parser) must not cost a torch import: seconds per call."""
    assert not _torch_after(f"from lethe.cli import main; main({argv!r})")


def test_reading_rows_does_not_import_torch(tmp_path):
    rows = tmp_path / "rows.parquet"
    script = (f"from lethe import cli; from lethe.verifier import records\n"
              f"records.write_rows([records.make_row(id='k')], {str(rows)!r})\n"
              f"assert cli._one_row('replay', {str(rows)!r}, 'k', None)['id'] == 'k'")
    assert not _torch_after(script)


@pytest.mark.slow
def test_verify_process_does_not_import_torch(files):
    """``lethe verify`` leaves torch to its sandboxed processes, the grading one included (grade_isolated)."""
    ref, cand = files("ref.py", K.SCALE_REF), files("cand.py", K.SCALE_DOUBLE)
    script = (f"from lethe.cli import main\n"
              f"assert main(['verify', {ref!r}, {cand!r}, '--device', 'cpu', '--json']) == 1")
    assert not _torch_after(script)


def test_verify_help_documents_the_json_schema_and_causes(capsys):
    from lethe.verifier.verdict import VERIFY_OUTPUT_SCHEMA

    assert cli.main(["verify", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert VERIFY_OUTPUT_SCHEMA in text and "`causes`" in text and "root cause" in text
