"""The scale run's training loop on the CPU at tiny size: exact resume, the non-finite stop, the log, the
dispatch proof, and the reference-path agreement (our Triton kernels on the interpreter)."""

import json

import pytest
import torch

from lethe.scale.model import get_config
from lethe.scale.train import GRAD_NORM_RTOL, LOSS_RTOL, TrainConfig, compare_paths, lr_at, train

TINY = get_config("tiny", n_layers=1, d_model=16)
CFG = TrainConfig(steps=6, batch_size=2, seq_len=16, lr=3e-3, warmup=2, val_every=3, val_batches=2, ckpt_every=3)


def rows(folder, kind="train"):
    return [r for r in map(json.loads, (folder / "log.jsonl").read_text().splitlines()) if r["kind"] == kind]


def test_resume_reproduces_the_uninterrupted_run(tmp_path, corpus):
    whole = train(TINY, CFG, corpus, tmp_path / "a", path="torch")
    assert whole["status"] == "done" and whole["step"] == 6
    cut = train(TINY, TrainConfig(**{**CFG.to_dict(), "stop_after": 4, "betas": CFG.betas}), corpus,
                tmp_path / "b", path="torch")
    assert cut["status"] == "stopped" and cut["step"] == 4
    # checkpoints at 3 (periodic) and 4 (the stop): the resume starts from 4
    resumed = train(TINY, CFG, corpus, tmp_path / "b", path="torch")
    assert resumed["resumed_from"] == 4 and resumed["status"] == "done"
    a, b = rows(tmp_path / "a"), rows(tmp_path / "b")
    assert [r["step"] for r in b] == list(range(1, 7))
    assert [r["loss"] for r in a] == [r["loss"] for r in b]
    assert [r["grad_norm"] for r in a] == [r["grad_norm"] for r in b]
    assert [r["loss"] for r in rows(tmp_path / "a", "val")] == [r["loss"] for r in rows(tmp_path / "b", "val")]


def test_resume_after_a_kill_drops_rows_past_the_checkpoint(tmp_path, corpus):
    train(TINY, CFG, corpus, tmp_path / "a", path="torch")
    run = tmp_path / "b"
    train(TINY, TrainConfig(**{**CFG.to_dict(), "stop_after": 3, "betas": CFG.betas}), corpus, run, path="torch")
    with (run / "log.jsonl").open("a") as fh:  # a step a killed process logged after its last checkpoint
        fh.write(json.dumps({"kind": "train", "step": 4, "loss": -1.0}) + "\n")
    train(TINY, CFG, corpus, run, path="torch")
    assert [r["loss"] for r in rows(run)] == [r["loss"] for r in rows(tmp_path / "a")]


def test_log_rows_and_run_files(tmp_path, corpus):
    res = train(TINY, CFG, corpus, tmp_path, path="torch")
    r = rows(tmp_path)[0]
    assert {"loss", "grad_norm", "lr", "seconds", "tokens_per_s", "peak_memory_bytes"} <= set(r)
    assert r["tokens_per_s"] > 0 and r["peak_memory_bytes"] > 0
    assert [v["step"] for v in rows(tmp_path, "val")] == [3, 6]
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["n_parameters"] == res["n_parameters"] > 0 and run["manifest_sha256"] == corpus.manifest_sha256
    assert not (tmp_path / "checkpoint.pt.tmp").exists()
    proof = json.loads((tmp_path / "dispatch_proof.json").read_text())
    assert proof["segments"][0]["path"] == "torch" and proof["all_dispatched"] is False


def test_dispatch_proof_spans_resumed_segments(tmp_path, corpus):
    cfg = get_config("tiny", n_layers=1)
    short = TrainConfig(**{**CFG.to_dict(), "steps": 3, "stop_after": 2, "val_every": 0, "betas": CFG.betas})
    train(cfg, short, corpus, tmp_path, path="ours")
    train(cfg, TrainConfig(**{**short.to_dict(), "stop_after": None, "betas": CFG.betas}), corpus, tmp_path,
          path="ours")
    train(cfg, TrainConfig(**{**short.to_dict(), "stop_after": None, "betas": CFG.betas}), corpus, tmp_path,
          path="ours")  # already done: adds no segment
    proof = json.loads((tmp_path / "dispatch_proof.json").read_text())
    assert [s["segment"] for s in proof["segments"]] == [[0, 2], [2, 3]]
    assert proof["all_dispatched"] is True and proof["steps"] == 3


def test_checkpoint_of_another_model_is_refused(tmp_path, corpus):
    train(TINY, TrainConfig(**{**CFG.to_dict(), "steps": 1, "betas": CFG.betas}), corpus, tmp_path, path="torch")
    with pytest.raises(ValueError, match="another corpus or model"):
        train(get_config("tiny"), CFG, corpus, tmp_path, path="torch")


def test_non_finite_loss_stops_and_records_why(tmp_path, corpus):
    res = train(TINY, TrainConfig(**{**CFG.to_dict(), "lr": 1e30, "warmup": 0, "grad_clip": 1e30,
                                     "betas": CFG.betas}), corpus, tmp_path, path="torch")
    assert res["status"] == "nonfinite"
    stop = json.loads((tmp_path / "stop.json").read_text())
    assert stop["reason"] in ("non-finite loss", "non-finite gradient norm") and stop["step"] >= 1


def test_non_finite_gradient_stops_and_names_the_parameter(tmp_path, corpus):
    def poison(model):
        model.head.weight.register_hook(lambda g: g * float("nan"))

    res = train(TINY, CFG, corpus, tmp_path, path="torch", model_hook=poison)
    assert res["status"] == "nonfinite" and res["step"] == 0
    stop = json.loads((tmp_path / "stop.json").read_text())
    assert stop["reason"] == "non-finite gradient norm" and stop["parameters"] == ["head.weight"]
    assert not (tmp_path / "checkpoint.pt").exists()


def test_bf16_autocast_runs(tmp_path, corpus):
    res = train(TINY, TrainConfig(**{**CFG.to_dict(), "steps": 2, "precision": "bf16", "betas": CFG.betas}),
                corpus, tmp_path, path="torch")
    assert res["status"] == "done"
    assert all(torch.isfinite(torch.tensor(r["loss"])) for r in rows(tmp_path))


def test_lr_schedule():
    c = TrainConfig(steps=10, lr=1.0, warmup=2, min_lr_ratio=0.1)
    assert lr_at(c, 0) == 0.5 and lr_at(c, 1) == 1.0 and abs(lr_at(c, 10) - 0.1) < 1e-12


def test_ours_path_dispatch_proof(tmp_path, corpus):
    cfg = get_config("tiny", n_layers=2)
    train(cfg, TrainConfig(**{**CFG.to_dict(), "steps": 2, "val_every": 2, "val_batches": 1, "betas": CFG.betas}),
          corpus, tmp_path, path="ours")
    proof = json.loads((tmp_path / "dispatch_proof.json").read_text())
    (seg,) = proof["segments"]
    assert proof["all_dispatched"] is True and seg["kernel_backends"] == ["triton"] and proof["steps"] == 2
    (key,) = seg["forward"]
    assert key == "lethe.kernels.mamba.fused_block|triton|FusedBlockFunctionBackward"
    assert seg["forward"][key] == seg["backward"][key] == 4  # 2 layers x 2 steps; validation not counted


@pytest.mark.parametrize("mixer", ["mamba", pytest.param("gdn", marks=pytest.mark.slow)])
def test_reference_path_agrees_with_ours(mixer, corpus):
    res = compare_paths(get_config("tiny", mixer=mixer, n_layers=1), TrainConfig(batch_size=2, seq_len=16, lr=1e-3,
                                                                               warmup=1), corpus, steps=3)
    assert res["loss_rtol"] == LOSS_RTOL and res["grad_norm_rtol"] == GRAD_NORM_RTOL
    assert res["agree"], res["steps"]
    assert res["dispatch"]["all_dispatched"]


@pytest.mark.parametrize("mixer", ["mamba", "gdn"])
def test_bf16_autocast_through_our_kernels(tmp_path, mixer, corpus):
    cfg = TrainConfig(steps=2, batch_size=2, seq_len=16, precision="bf16", val_every=2, val_batches=1)
    res = train(get_config("tiny", mixer=mixer, n_layers=1), cfg, corpus, tmp_path, path="ours")
    assert res["status"] == "done"
    assert json.loads((tmp_path / "dispatch_proof.json").read_text())["all_dispatched"] is True


def test_checkpoint_in_its_own_folder(tmp_path, corpus):
    short = TrainConfig(**{**CFG.to_dict(), "stop_after": 2, "betas": CFG.betas})
    train(TINY, short, corpus, tmp_path / "run", path="torch", ckpt_dir=tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / "checkpoint.pt").is_file() and not (tmp_path / "run" / "checkpoint.pt").exists()
    res = train(TINY, CFG, corpus, tmp_path / "run", path="torch", ckpt_dir=tmp_path / "ckpt")
    assert res["resumed_from"] == 2 and res["status"] == "done"


def test_time_budget_checkpoints_and_stops(tmp_path, corpus):
    res = train(TINY, TrainConfig(**{**CFG.to_dict(), "time_budget_s": 0.0, "ckpt_every": 1000, "betas": CFG.betas}),
                corpus, tmp_path, path="torch")
    assert res["status"] == "budget" and res["step"] == 1
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=False)["step"] == 1
    again = train(TINY, CFG, corpus, tmp_path, path="torch")
    assert again["resumed_from"] == 1 and again["status"] == "done"


def test_checkpoint_every_few_seconds(tmp_path, corpus, monkeypatch):
    saved = []
    import lethe.scale.train as tr

    real = tr.save_checkpoint
    monkeypatch.setattr(tr, "save_checkpoint", lambda path, m, o, step, extra: (saved.append(step),
                                                                               real(path, m, o, step, extra)))
    train(TINY, TrainConfig(**{**CFG.to_dict(), "ckpt_every": 1000, "ckpt_every_s": 0.0, "betas": CFG.betas}),
          corpus, tmp_path, path="torch")
    assert saved == [1, 2, 3, 4, 5, 6]


def test_a_failed_checkpoint_stops_the_run_and_keeps_its_record(tmp_path, corpus, monkeypatch):
    import lethe.scale.train as tr

    real = tr.torch.save

    def full_disk(obj, f, *a, **k):
        real({"partial": True}, f)  # a half-written temporary file, as a full disk leaves it
        raise RuntimeError("unexpected pos 4451555648 vs 4451555548")

    monkeypatch.setattr(tr.torch, "save", full_disk)
    res = train(TINY, TrainConfig(**{**CFG.to_dict(), "ckpt_every": 2, "betas": CFG.betas}), corpus, tmp_path,
                path="torch")
    assert res["status"] == "checkpoint_failed" and res["step"] == 2
    assert "unexpected pos" in res["checkpoint_error"]["error"]
    assert json.loads((tmp_path / "run.json").read_text())["status"] == "checkpoint_failed"
    assert (tmp_path / "dispatch_proof.json").exists()
    assert not list(tmp_path.glob("*.tmp"))
    assert rows(tmp_path, "checkpoint_error")[0]["step"] == 2
    assert len(rows(tmp_path)) == 2
