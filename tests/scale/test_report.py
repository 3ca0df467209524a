"""The scale run's summary reads what a run folder shows, including a cut run without run.json."""

import json

import pytest

from lethe.scale.report import render, summarise


def _folder(tmp_path, val_losses, with_run=False):
    rows = []
    for i in range(1, 7):
        rows.append({"kind": "train", "step": i, "loss": 6.0 - i * 0.5, "grad_norm": 1.0, "lr": 1e-4,
                     "seconds": 10.0 + (5.0 if i <= 2 else 0.1 * i), "tokens_per_s": 400.0 - (100 if i <= 2 else 0),
                     "peak_memory_bytes": (40 + i) * 2**30})
        if i % 2 == 0:
            rows.append({"kind": "val", "step": i, "loss": val_losses[i // 2 - 1]})
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "reference_check.json").write_text(json.dumps({
        "agree": True, "max_loss_rel": 1e-7, "max_grad_norm_rel": 2e-7, "model_cfg": {"mixer": "mamba"},
        "train_cfg": {"batch_size": 8, "seq_len": 512},
        "dispatch": {"all_dispatched": True, "kernel_backends": ["triton"]}}))
    (tmp_path / "provenance.json").write_text(json.dumps({
        "run": "r", "parameters": 1_100_000_000, "gpu": "H200", "driver": "1", "precision": "bf16",
        "dataset": "bytes", "torch": "t", "triton": "x", "git_sha": "0" * 40, "outcome": "cut"}))
    if with_run:
        (tmp_path / "run.json").write_text(json.dumps({"status": "budget"}))
    return tmp_path


def test_summary_of_a_cut_run(tmp_path):
    s = summarise(_folder(tmp_path, [3.0, 2.5, 2.0]))
    assert s["steps"] == 6 and s["status"] == "cut" and s["val_falling"]
    assert s["first_val"]["loss"] == 3.0 and s["last_val"]["step"] == 6
    assert s["median_step_s"] == pytest.approx(10.0 + 0.1 * 4.5)  # steps 3..6: warm-up steps left out
    assert s["peak_memory_gib"] == pytest.approx(46.0)


def test_validation_that_rises_is_reported(tmp_path):
    s = summarise(_folder(tmp_path, [3.0, 3.5, 2.0], with_run=True))
    assert not s["val_falling"] and s["status"] == "budget"


def test_render_writes_table_and_curve(tmp_path):
    (tmp_path / "run").mkdir()
    run = _folder(tmp_path / "run", [3.0, 2.5, 2.0])
    render(run, tmp_path / "t.md", tmp_path / "t.tex", tmp_path / "fig")
    md = (tmp_path / "t.md").read_text()
    assert "1,100,000,000" in md and "validation loss falls" in md and "PTB-XL" in md
    assert (tmp_path / "fig" / "scale_curve.png").exists() and (tmp_path / "fig" / "scale_curve.pdf").exists()


def test_committed_run_reads_and_its_provenance_is_complete():
    from pathlib import Path

    from lethe.provenance import validate

    run = Path(__file__).resolve().parents[2] / "results" / "scale" / "mamba-1b"
    if not run.exists():
        pytest.skip("no committed scale run")
    assert validate(json.loads((run / "provenance.json").read_text())) == []
    s = summarise(run)
    assert s["parameters"] >= 1.0e9 and s["reference_agree"] and s["dispatch_checked"]
