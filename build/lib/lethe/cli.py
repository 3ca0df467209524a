"""The ``lethe`` command line. Subcommands live in one argparse tree built here.

Other rooms add their own subcommand by listing a module in ``EXTRA_COMMANDS``; that module defines
``add_subcommand(subparsers)``, which adds its parser and sets ``func`` (a callable taking the parsed
namespace and returning the exit code) with ``parser.set_defaults(func=...)``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

# Modules that contribute subcommands (each defines add_subcommand(subparsers)); import failures are reported
# by `lethe --help` as unavailable rather than breaking the verifier's own commands.
EXTRA_COMMANDS: list[str] = []


def _print_human(row: dict, verdict: str) -> None:
    print(f"{row['id']}  status={row['status']}  profile={row['profile']}  device={row['device']}  "
          f"seed={row['seed']}  {row['seconds']:.1f}s")
    if row.get("error"):
        print(f"  error: {row['error'][:500]}")
    for gid, g in row["gates"].items():
        mark = {"pass": "ok  ", "fail": "FAIL", "na": "n/a ", "error": "ERR "}[g["status"]]
        print(f"  {gid}  {mark}  {g['reason'][:160]}")
    print(f"verdict: {verdict}")


def _json_summary(row: dict, verdict: str) -> dict:
    return {
        "verdict": verdict,
        "status": row["status"],
        "id": row["id"],
        "profile": row["profile"],
        "device": row["device"],
        "seed": row["seed"],
        "seconds": row["seconds"],
        "weights_copied": row["weights_copied"],
        "output_aliasing": row["output_aliasing"],
        "error": row["error"],
        "gates": {g: {"status": v["status"], "reason": v["reason"], "evidence": json.loads(v["evidence"])}
                  for g, v in row["gates"].items()},
    }


def cmd_verify(args: argparse.Namespace) -> int:
    from lethe.verifier import api, records

    row = api.verify_files(args.ref, args.cand, profile=args.profile, device=args.device, seed=args.seed,
                           timeout_s=args.timeout, kernel_id=args.id or Path(args.cand).stem,
                           corpus=args.corpus)
    verdict = api.verdict(row)
    if args.out:
        out = Path(args.out)
        rows = records.read_rows(out) if (out.exists() and args.append) else []
        records.write_rows(rows + [row], out)
    if args.json:
        print(json.dumps(_json_summary(row, verdict), sort_keys=True))
    else:
        _print_human(row, verdict)
    return 0 if verdict == "pass" else 1


def cmd_replay(args: argparse.Namespace) -> int:
    from lethe.verifier import api, records

    rows = [r for r in records.read_rows(args.rows) if r["id"] == args.id]
    if not rows:
        print(f"no row with id {args.id!r} in {args.rows}", file=sys.stderr)
        return 2
    res = api.replay(rows[0], args.gate, ref_path=args.ref, cand_path=args.cand)
    if args.json:
        print(json.dumps(res, sort_keys=True))
    else:
        rec, new = res["recorded"], res["replayed"]
        print(f"{res['id']} {res['gate']}: recorded {rec['status']} (seed {rec['seed']}), "
              f"replayed {new['status']} (seed {new['seed']})"
              + ("" if res["sources_match"] else "  [WARNING: sources changed since the row was written]"))
        print("reproduces" if res["reproduces"] else f"DOES NOT reproduce\n  recorded: {rec['evidence'][:400]}\n"
              f"  replayed: {new['evidence'][:400]}")
    return 0 if res["reproduces"] else 1


def build_parser() -> argparse.ArgumentParser:
    from lethe.verifier.gates import GATE_IDS
    from lethe.verifier.profiles import PROFILES

    parser = argparse.ArgumentParser(prog="lethe", description="Contract-grade correctness verifier for GPU kernels.")
    sub = parser.add_subparsers(dest="command", required=True)

    v = sub.add_parser("verify", help="verify one candidate against one KernelBench-style reference")
    v.add_argument("ref", help="reference source (defines Model, get_inputs, get_init_inputs)")
    v.add_argument("cand", help="candidate source (defines ModelNew)")
    v.add_argument("--profile", default="strict", choices=sorted(PROFILES))
    v.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    v.add_argument("--seed", type=int, default=0)
    v.add_argument("--timeout", type=float, default=300.0, help="candidate wall-clock budget in seconds")
    v.add_argument("--id", default="", help="row id (default: candidate file stem)")
    v.add_argument("--corpus", default="")
    v.add_argument("--json", action="store_true", help="machine-readable output")
    v.add_argument("--out", default="", help="write the verdict row to this parquet file")
    v.add_argument("--append", action="store_true", help="with --out: append to an existing file")
    v.set_defaults(func=cmd_verify)

    r = sub.add_parser("replay", help="re-run one gate of one recorded row from its seed")
    r.add_argument("rows", help="parquet file of lethe.verdict/1 rows")
    r.add_argument("id")
    r.add_argument("gate", choices=list(GATE_IDS))
    r.add_argument("--ref", default=None, help="reference path (default: the one recorded in the row)")
    r.add_argument("--cand", default=None, help="candidate path (default: the one recorded in the row)")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=cmd_replay)

    for name in EXTRA_COMMANDS:
        try:
            importlib.import_module(name).add_subcommand(sub)
        except Exception as exc:  # noqa: BLE001 - one room's broken command must not take down the CLI
            print(f"lethe: subcommand module {name} unavailable: {exc}", file=sys.stderr)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
