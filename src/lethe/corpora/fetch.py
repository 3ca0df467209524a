"""Pinned, hash-checked, resumable download of a corpus file from the Hugging Face Hub or a git host.

A corpus is named by dataset (or repository), revision (a commit sha, never a branch) and file, and checked by
SHA-256 and size. A pin with ``url_base`` names a file of a git repository served raw at
``<url_base>/<revision>/<filename>`` (GitHub's raw scheme); any other pin is a Hub dataset file. The file lands in ``<cache_dir>/<dataset>/<revision>/<filename>`` (outside ``results/``). Download goes
to ``<file>.part`` and resumes from its size with an HTTP Range request; the file is renamed into place only
after its hash matches, so a truncated or corrupted download is never used. Offline, the fetch fails at once
with a message that says how to put the file in place by hand.
"""

from __future__ import annotations

import hashlib
import os
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

DEFAULT_ENDPOINT = "https://huggingface.co"
CHUNK = 1 << 20


@dataclass(frozen=True)
class Pin:
    """One pinned corpus file; ``sha256``/``size`` may be None only for a pin not yet verified by anyone."""

    dataset: str
    revision: str
    filename: str
    sha256: str | None
    size: int | None = None
    license: str = ""
    url_base: str = ""

    def url(self, endpoint: str = DEFAULT_ENDPOINT) -> str:
        """The file's URL at a fixed revision: ``url_base``'s raw scheme when set (``endpoint`` then unused),
        else the Hub's resolve URL for a dataset file (huggingface_hub's scheme)."""
        if self.url_base:
            return f"{self.url_base.rstrip('/')}/{self.revision}/{self.filename}"
        return f"{endpoint.rstrip('/')}/datasets/{self.dataset}/resolve/{self.revision}/{self.filename}"

    def path(self, cache_dir: str | os.PathLike[str]) -> Path:
        return Path(cache_dir) / self.dataset.replace("/", "__") / self.revision / self.filename


# Main corpus. The pin was recorded by a third party (see /work/shared/data/drkernel/PIN.md and
# docs/audit.md); the first real download verifies it.
DRKERNEL = Pin(
    dataset="hkust-nlp/drkernel-coldstart-8k",
    revision="cba0ef06a5b1e3c307b7acfa8b6acb7a46578105",
    filename="drkernel-coldstart-8k.parquet",
    sha256="4ed72a9f85c069aaec2daf65229c35d1b888762a455e115fe23f8eae2541097b",
    size=163_236_950,
    license="MIT",
)

# Second corpus: the archive's level-1 split. No verified revision or hash is known on this machine (the Hub
# is unreachable); the pin stays incomplete, and fetch refuses to trust an unhashed file (see PinIncomplete).
SAKANA = Pin(
    dataset="SakanaAI/AI-CUDA-Engineer-Archive",
    revision="",
    filename="level_1.parquet",
    sha256=None,
    license="CC-BY-4.0",
)

PINS = {"drkernel": DRKERNEL, "sakana": SAKANA}


class FetchError(RuntimeError):
    """The corpus could not be put in place; the message says how to supply it by hand."""


class HashMismatch(FetchError):
    """A file's content does not match its pin (corrupt, truncated, or a different revision)."""


class PinIncomplete(FetchError):
    """The pin lacks a revision or hash, so a downloaded file could not be trusted."""


def sha256_file(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def _manual_hint(pin: Pin, dest: Path) -> str:
    if pin.url_base:
        return (
            f"To supply it by hand, download {pin.url()} (file {pin.filename} of {pin.dataset} at commit "
            f"{pin.revision}) on a machine with network access and place it at {dest}; its SHA-256 must be "
            f"{pin.sha256 or '<unknown>'}" + (f" and its size {pin.size:,} bytes." if pin.size else ".")
        )
    return (
        f"To supply it by hand, download {pin.filename} of dataset {pin.dataset} at revision "
        f"{pin.revision or '<unpinned>'} on a machine with Hub access (e.g. "
        f"`huggingface-cli download --repo-type dataset {pin.dataset} {pin.filename} --revision "
        f"{pin.revision or '<sha>'} --local-dir .`), and place it at {dest}; its SHA-256 must be "
        f"{pin.sha256 or '<unknown: record it in lethe.corpora.fetch>'}"
        + (f" and its size {pin.size:,} bytes." if pin.size else ".")
    )


def verify(pin: Pin, path: str | os.PathLike[str]) -> None:
    """Raise HashMismatch unless ``path`` has the pinned size and SHA-256."""
    path = Path(path)
    if pin.sha256 is None:
        raise PinIncomplete(f"{pin.dataset}@{pin.revision or '<unpinned>'}: no SHA-256 pinned; refusing to trust {path}.")
    size = path.stat().st_size
    if pin.size is not None and size != pin.size:
        raise HashMismatch(
            f"{path}: {size:,} bytes, pin says {pin.size:,} ({'truncated' if size < pin.size else 'too long'}). "
            f"{_manual_hint(pin, path)}"
        )
    got = sha256_file(path)
    if got != pin.sha256:
        raise HashMismatch(f"{path}: SHA-256 {got} does not match the pinned {pin.sha256}. {_manual_hint(pin, path)}")


Opener = Callable[[urllib.request.Request, float], object]


def _default_opener(req: urllib.request.Request, timeout: float):
    return urllib.request.urlopen(req, timeout=timeout)  # noqa: S310 - https URL built from a fixed scheme


def fetch(
    pin: Pin,
    cache_dir: str | os.PathLike[str],
    *,
    endpoint: str | None = None,
    timeout_s: float = 10.0,
    opener: Opener | None = None,
    token: str | None = None,
) -> Path:
    """Return the verified local path of ``pin``, downloading (or resuming) it when needed.

    ``endpoint`` defaults to ``$HF_ENDPOINT`` or the public Hub, like huggingface_hub. A file already in
    place is re-verified every call (cheap next to an audit, and it catches later corruption).
    """
    dest = pin.path(cache_dir)
    if not pin.revision or pin.sha256 is None:
        raise PinIncomplete(
            f"{pin.dataset}: the pin has no {'revision' if not pin.revision else 'SHA-256'}; a download could not be "
            f"verified. {_manual_hint(pin, dest)} Then record the revision and hash in lethe.corpora.fetch."
        )
    if dest.exists():
        verify(pin, dest)
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    if pin.url_base:
        endpoint = pin.url_base  # a git host's raw scheme: the Hub endpoint and token do not apply
    else:
        endpoint = endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT
    opener = opener or _default_opener
    have = part.stat().st_size if part.exists() else 0
    if pin.size is not None and have > pin.size:
        part.unlink()  # cannot be a prefix of the pinned file
        have = 0
    if pin.size is None or have < pin.size or not part.exists():  # an empty pinned file still needs its .part
        headers = {"User-Agent": "lethe-fetch/1"}
        if have:
            headers["Range"] = f"bytes={have}-"
        if not pin.url_base and (token or os.environ.get("HF_TOKEN")):
            headers["Authorization"] = f"Bearer {token or os.environ['HF_TOKEN']}"
        req = urllib.request.Request(pin.url(endpoint), headers=headers)
        try:
            resp = opener(req, timeout_s)
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            raise FetchError(
                f"cannot reach {endpoint} to fetch {pin.dataset} (revision {pin.revision}, file {pin.filename}): "
                f"{exc}. {_manual_hint(pin, dest)}"
            ) from exc
        status = getattr(resp, "status", 200)
        # A server that ignores Range answers 200 with the whole file: start the .part over.
        mode = "ab" if have and status == 206 else "wb"
        with resp, open(part, mode) as fh:  # type: ignore[union-attr]
            for block in iter(lambda: resp.read(CHUNK), b""):  # type: ignore[union-attr]
                fh.write(block)
            fh.flush()
            os.fsync(fh.fileno())
    try:
        verify(pin, part)
    except HashMismatch:
        part.unlink(missing_ok=True)  # a bad prefix would poison every later resume
        raise
    os.replace(part, dest)
    return dest
