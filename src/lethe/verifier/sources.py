"""Reading a reference or candidate source file, without importing torch (the command line reads both before
anything needs torch, and its own process never does)."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def read_source(path: str | Path) -> str:
    """A Python source file's text decoded as the interpreter decodes it: a UTF-8 byte-order mark, or the
    encoding a PEP 263 coding line names, else UTF-8 (``importlib.util.decode_source``). Raises OSError when
    the file cannot be read, SyntaxError or UnicodeDecodeError when its bytes do not decode."""
    return importlib.util.decode_source(Path(path).read_bytes()).removeprefix("\ufeff")
