"""``lethe repro ROWS ID GATE --out DIR``: the subcommand (registered through ``lethe.cli.EXTRA_COMMANDS``).

Exit codes follow ``lethe.verifier.verdict``: 0 the repro was written (the failure reproduced); 1 the recorded
failure does not reproduce (nothing written); 2 usage or input error (no such row, the gate did not fail in
it, a gate no stored input can show); 3 not runnable here (the row's device is absent, a CUDA candidate on
a CPU machine); 4 the harness failed.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path


def add_subcommand(sub) -> None:
    from lethe.repro.scope import DEFAULT_BUDGET_S, SUPPORTED_GATES

    p = sub.add_parser("repro", help="write a minimised, standalone failing case (pytest + tensor file) for one "
                                     "failed gate of one recorded row")
    p.add_argument("rows", help="parquet file of verdict rows")
    p.add_argument("id")
    p.add_argument("gate", help=f"one of {', '.join(SUPPORTED_GATES)}")
    p.add_argument("--out", required=True, help="directory to write the repro into")
    p.add_argument("--no-shrink", action="store_true", help="keep the recorded probe's input as it is")
    p.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S,
                   help="wall-clock budget for shrinking in seconds (default %(default)g)")
    p.add_argument("--ref", default=None, help="reference path (default: the one recorded in the row)")
    p.add_argument("--cand", default=None, help="candidate path (default: the one recorded in the row)")
    p.add_argument("--profile", default=None, help="the row's profile, when several rows share the id")
    p.add_argument("--device", default=None, choices=["cpu", "cuda"],
                   help="re-derive on this device instead of the row's (the repro says so)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_repro)


def cmd_repro(args: argparse.Namespace) -> int:
    from lethe.cli import _fail, _one_row
    from lethe.repro.core import ReproError, make_repro
    from lethe.verifier.report import escape

    if not Path(args.rows).is_file():
        return _fail("repro", f"rows file not found: {args.rows}")
    row = _one_row("repro", args.rows, args.id, args.profile)
    if isinstance(row, int):
        return row
    command = "lethe repro " + " ".join(shlex.quote(a) for a in sys.argv[2:]) if sys.argv[1:2] == ["repro"] else ""
    try:
        info = make_repro(row, args.gate.upper(), args.out, ref_path=args.ref, cand_path=args.cand,
                          shrink_input=not args.no_shrink, budget_s=args.budget_s, device=args.device,
                          command=command or f"lethe repro {args.rows} {args.id} {args.gate} --out {args.out}")
    except ReproError as exc:
        if exc.code == 2:
            return _fail("repro", str(exc))
        print(f"lethe repro: {escape(str(exc))}", file=sys.stderr)
        return exc.code
    if args.json:
        print(json.dumps(info, sort_keys=True, default=str))
    else:
        sig = info["signature"]
        print(escape(f"{info['id']} {info['gate']} on probe {info['probe']}: {sig['where']} "
                     f"({', '.join(sig['classes'])}); input {info['original_elements']} -> {info['elements']} "
                     f"elements; wrote {args.out}"))
        print(f"run: python -m pytest -q {shlex.quote(str(args.out))}")
    return 0
