"""Give every Snakemake rule the project's one software environment (``conda: CONDA_ENV``).

`snakemake --lint` asks each rule to name its environment; all of Lethe's rules run in the same pinned
environment (workflow/envs/lethe.yaml), so the rule files say so through the CONDA_ENV constant defined in
common.smk. Idempotent: run it after adding rules (a test checks that no rule is missing it).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

RULE = re.compile(r"^(?P<indent>[ \t]*)rule\s+\w+\s*:\s*$")


def add_envs(text: str) -> str:
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        m = RULE.match(line)
        if m:
            # Look ahead over this rule's body for an existing conda directive.
            j, body_indent, has = i + 1, None, False
            while j < len(lines):
                nxt = lines[j]
                if nxt.strip() == "":
                    j += 1
                    continue
                ind = len(nxt) - len(nxt.lstrip())
                if ind <= len(m["indent"]):
                    break
                body_indent = body_indent if body_indent is not None else nxt[:ind]
                if nxt.strip().startswith("conda:"):
                    has = True
                j += 1
            if not has:
                pad = body_indent or (m["indent"] + "    ")
                out.append(f"{pad}conda:\n{pad}    CONDA_ENV\n")
        i += 1
    return "".join(out)


def main(paths: list[str]) -> int:
    for p in paths:
        path = Path(p)
        new = add_envs(path.read_text())
        if new != path.read_text():
            path.write_text(new)
            print(f"updated {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
