"""Data of the scale run.

* PTB-XL (the paper's dataset: 12-lead ECG, PhysioNet, version 1.0.3) through a pin of the corpora room
  (:class:`lethe.corpora.fetch.Pin`). No SHA-256 of it has been recorded by anyone who could reach PhysioNet, so
  :func:`fetch_ptbxl` fails at once, before any network access, with the message saying how to put the file in
  place by hand and record its hash (the corpora room never trusts an unhashed download).
* The run's dataset here: the Python standard library's own sources as bytes (``<sys.base_prefix>/lib/
  python3.X/*.py``, the top folder only). It ships with every Python the registry environment has, is real
  text of a few megabytes, needs no network and no licence beyond the PSF's, and suits a byte-level LM
  objective. The file list is sorted; a manifest records each file's SHA-256 and split, and its own hash names
  the corpus. A file goes to validation when the first 32 bits of its SHA-256 mod 100 fall below
  ``val_percent``: the split depends on content only, not on the order or number of files.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from lethe.corpora.fetch import Pin, PinIncomplete, fetch

PTBXL = Pin(
    dataset="physionet/ptb-xl",
    revision="1.0.3",
    filename="ptbxl_database.csv",
    sha256=None,
    license="CC-BY-4.0",
    url_base="https://physionet.org/files/ptb-xl",
)
# What else a PTB-XL run needs beside the label table (same folder, same revision): scp_statements.csv and the
# 100 Hz waveforms under records100/ (WFDB), both in the archive of the whole release.
PTBXL_ARCHIVE_URL = ("https://physionet.org/static/published-projects/ptb-xl/"
                     "ptb-xl-a-large-publicly-available-electrocardiography-dataset-1.0.3.zip")

SEPARATOR = 0  # a byte no .py source contains: it marks the boundary between two files


def fetch_ptbxl(cache_dir) -> Path:
    """The verified PTB-XL label table (:data:`PTBXL`); raises :class:`lethe.corpora.fetch.FetchError` with a
    hand-supply message while the pin has no recorded hash (and offline)."""
    try:
        return fetch(PTBXL, cache_dir)
    except PinIncomplete as exc:  # this pin lives here, not in the corpora room's table
        raise PinIncomplete(str(exc).replace("lethe.corpora.fetch", "lethe.scale.data.PTBXL")) from None


def stdlib_root() -> Path:
    """``<sys.base_prefix>/lib/python3.X``: the standard library of the interpreter running this code."""
    return Path(sys.base_prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"


def stdlib_files(root: Path | None = None) -> list[Path]:
    """The ``*.py`` files at the top of ``root`` (default :func:`stdlib_root`), sorted by name."""
    root = Path(root) if root is not None else stdlib_root()
    files = sorted(p for p in root.glob("*.py") if p.is_file())
    if not files:
        raise FileNotFoundError(f"no *.py files in {root}")
    return files


def split_of(sha256: str, val_percent: int) -> str:
    """``"val"`` when ``int(sha256[:8], 16) % 100 < val_percent``, else ``"train"``."""
    return "val" if int(sha256[:8], 16) % 100 < val_percent else "train"


@dataclass
class ByteCorpus:
    """Train and validation bytes (uint8 tensors, files joined by :data:`SEPARATOR`) and the manifest."""

    train: torch.Tensor
    val: torch.Tensor
    manifest: dict

    @property
    def manifest_sha256(self) -> str:
        return self.manifest["manifest_sha256"]


def stdlib_corpus(root: Path | None = None, val_percent: int = 10) -> ByteCorpus:
    """The standard library's sources as a :class:`ByteCorpus`; the manifest lists every file (name, size,
    SHA-256, split) and ``manifest_sha256`` hashes that list, so two runs on different Pythons are told apart."""
    files = stdlib_files(root)
    parts: dict[str, list[bytes]] = {"train": [], "val": []}
    rows = []
    for p in files:
        data = p.read_bytes()
        sha = hashlib.sha256(data).hexdigest()
        split = split_of(sha, val_percent)
        parts[split].append(data)
        rows.append({"name": p.name, "size": len(data), "sha256": sha, "split": split})
    if not parts["train"] or not parts["val"]:
        raise ValueError(f"val_percent={val_percent} leaves an empty split over {len(files)} files")
    listing = json.dumps(rows, sort_keys=True, separators=(",", ":")).encode()
    manifest = {
        "source": "python-stdlib",
        "python": ".".join(map(str, sys.version_info[:3])),
        "root": str(Path(root) if root is not None else stdlib_root()),
        "val_percent": val_percent,
        "n_files": len(rows),
        "bytes": {s: sum(r["size"] for r in rows if r["split"] == s) for s in ("train", "val")},
        "files": rows,
        "manifest_sha256": hashlib.sha256(listing).hexdigest(),
    }
    sep = bytes([SEPARATOR])

    def join(chunks):
        return torch.frombuffer(bytearray(sep.join(chunks)), dtype=torch.uint8).clone()

    return ByteCorpus(train=join(parts["train"]), val=join(parts["val"]), manifest=manifest)


def train_batch(data: torch.Tensor, step: int, batch_size: int, seq_len: int, seed: int):
    """Inputs and targets ``[batch_size, seq_len]`` (int64) of step ``step``: windows at offsets drawn from a
    generator seeded by (seed, step) alone, so a resumed run sees exactly the batches it would have seen."""
    if data.numel() < seq_len + 2:
        raise ValueError(f"{data.numel()} bytes cannot hold a window of {seq_len + 1}")
    gen = torch.Generator().manual_seed(seed * 1_000_003 + step)
    starts = torch.randint(0, data.numel() - seq_len - 1, (batch_size,), generator=gen)
    win = torch.stack([data[s:s + seq_len + 1] for s in starts.tolist()]).long()
    return win[:, :-1], win[:, 1:]


def val_batches(data: torch.Tensor, batch_size: int, seq_len: int, n_batches: int):
    """A fixed list of ``n_batches`` validation batches: consecutive non-overlapping windows from the start
    (fewer when the split is short)."""
    n_win = min(n_batches * batch_size, (data.numel() - 1) // seq_len)
    win = torch.stack([data[i * seq_len:i * seq_len + seq_len + 1] for i in range(n_win)]).long()
    return [(w[:, :-1], w[:, 1:]) for w in win.split(batch_size) if len(w)]


def main(argv=None) -> int:
    """``python -m lethe.scale.data fetch-ptbxl --cache DIR`` (the pinned fetch rule) or ``manifest --out F``."""
    import argparse

    from lethe.corpora.fetch import FetchError

    ap = argparse.ArgumentParser(prog="python -m lethe.scale.data")
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fetch-ptbxl")
    f.add_argument("--cache", required=True)
    m = sub.add_parser("manifest")
    m.add_argument("--out", required=True)
    m.add_argument("--val-percent", type=int, default=10)
    args = ap.parse_args(argv)
    if args.cmd == "fetch-ptbxl":
        try:
            print(fetch_ptbxl(args.cache))
        except FetchError as exc:
            print(f"PTB-XL not available: {exc}", file=sys.stderr)
            return 2
        return 0
    corpus = stdlib_corpus(val_percent=args.val_percent)
    Path(args.out).write_text(json.dumps(corpus.manifest, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
