"""The scale run's data: the PTB-XL pin fails at once offline; the standard-library byte corpus is deterministic."""

import pytest
import torch

from lethe.corpora.fetch import FetchError
from lethe.scale import data


def test_ptbxl_fails_at_once_with_hand_supply_message(tmp_path, monkeypatch):
    def no_network(*a, **k):
        raise AssertionError("the pinned fetch must not reach the network without a recorded hash")

    monkeypatch.setattr("lethe.corpora.fetch._default_opener", no_network)
    with pytest.raises(FetchError) as exc:
        data.fetch_ptbxl(tmp_path)
    msg = str(exc.value)
    assert "physionet.org/files/ptb-xl/1.0.3/ptbxl_database.csv" in msg and "by hand" in msg
    assert "lethe.scale.data.PTBXL" in msg


def test_ptbxl_cli_exit_code(tmp_path, capsys):
    assert data.main(["fetch-ptbxl", "--cache", str(tmp_path)]) == 2
    assert "PTB-XL not available" in capsys.readouterr().err


def test_stdlib_corpus_manifest_and_split(corpus):
    m = corpus.manifest
    names = [r["name"] for r in m["files"]]
    assert names == sorted(names) and m["n_files"] == len(names) > 50
    assert all(r["split"] == data.split_of(r["sha256"], 10) for r in m["files"])
    assert m["bytes"]["train"] + m["bytes"]["val"] == sum(r["size"] for r in m["files"])
    # files joined by one separator byte each
    n_val = sum(r["split"] == "val" for r in m["files"])
    assert corpus.val.numel() == m["bytes"]["val"] + n_val - 1
    assert corpus.train.dtype == torch.uint8


def test_manifest_hash_is_stable(corpus):
    assert data.stdlib_corpus().manifest_sha256 == corpus.manifest_sha256


def test_split_of():
    assert data.split_of("00000000" + "f" * 56, 10) == "val"
    assert data.split_of(f"{99:08x}" + "0" * 56, 10) == "train"


def test_batches_deterministic(corpus):
    x1, y1 = data.train_batch(corpus.train, 7, 3, 32, seed=1)
    x2, y2 = data.train_batch(corpus.train, 7, 3, 32, seed=1)
    assert torch.equal(x1, x2) and torch.equal(x1[:, 1:], y1[:, :-1]) and x1.shape == (3, 32)
    x3, _ = data.train_batch(corpus.train, 8, 3, 32, seed=1)
    assert not torch.equal(x1, x3)
    vb = data.val_batches(corpus.val, 2, 16, 3)
    assert len(vb) == 3 and torch.equal(vb[0][0][0], corpus.val[:16].long())
