"""The DDP path of the training loop on the CPU: two gloo ranks at tiny size train the same losses as one process
with the global batch, and only rank 0 writes the run folder."""

import json

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from lethe.scale.data import stdlib_corpus
from lethe.scale.model import get_config
from lethe.scale.train import TrainConfig, train

TINY = get_config("tiny", n_layers=1, d_model=16)


def _cfg(batch_size):
    return TrainConfig(steps=3, batch_size=batch_size, seq_len=16, lr=3e-3, warmup=1, val_every=3, val_batches=1,
                       ckpt_every=3)


def _rank(rank, world, init, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        train(TINY, _cfg(2), stdlib_corpus(), out, path="torch")
    finally:
        dist.destroy_process_group()


def _losses(folder):
    return [r["loss"] for r in map(json.loads, (folder / "log.jsonl").read_text().splitlines())
            if r["kind"] == "train"]


@pytest.mark.slow
def test_two_gloo_ranks_match_one_process_with_the_global_batch(tmp_path, corpus):
    out = tmp_path / "ddp"
    mp.spawn(_rank, args=(2, f"file://{tmp_path / 'rendezvous'}", out), nprocs=2, join=True)
    train(TINY, _cfg(4), corpus, tmp_path / "one", path="torch")
    run = json.loads((out / "run.json").read_text())
    assert run["world_size"] == 2 and run["status"] == "done"
    torch.testing.assert_close(torch.tensor(_losses(out)), torch.tensor(_losses(tmp_path / "one")), rtol=1e-5,
                               atol=0)
    assert len(_losses(out)) == 3  # rank 1 wrote nothing into the log
