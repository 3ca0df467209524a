"""The ``lethe`` command line. Subcommands live in one argparse tree built here.

Other rooms add their own subcommand by listing a module in ``EXTRA_COMMANDS``; that module defines
``add_subcommand(subparsers)``, which adds its parser and sets ``func`` (a callable taking the parsed
namespace and returning the exit code) with ``parser.set_defaults(func=...)``.
"""

from __future__ import annotations

import argparse
import fcntl
import importlib
import json
import os
import sys
from pathlib import Path

# Modules that contribute subcommands (each defines add_subcommand(subparsers)); import failures are reported
# by `lethe --help` as unavailable rather than breaking the verifier's own commands.
EXTRA_COMMANDS: list[str] = ["lethe.audit.batch", "lethe.repro.cli", "lethe.audit.portability"]


def _fail(command: str, message: str) -> int:
    """A usage problem (missing or undecodable input, unwritable output): one escaped line on stderr, exit 2."""
    from lethe.verifier.report import escape

    print(f"lethe {command}: {escape(message)}", file=sys.stderr)
    return 2


def _one_row(cmd: str, rows_path: str, row_id: str, profile: str | None):
    """The one verdict row ``row_id`` (of ``profile`` when given) in a rows file, or the exit code of a usage
    error: none with that id, or several different rows under it (ids are unique by default; an older file may
    repeat one)."""
    from lethe.verifier import records

    rows = [r for r in records.read_rows(rows_path) if r["id"] == row_id
            and (profile is None or r["profile"] == profile)]
    if not rows:
        return _fail(cmd, f"no row with id {row_id!r} in {rows_path}")
    if len({(r["profile"], r["seed"], r["sources"]) for r in rows}) > 1:
        return _fail(cmd, f"{len(rows)} different rows have id {row_id!r} in {rows_path}; "
                          f"name one with --profile or give the rows unique ids")
    return rows[0]


def _read(command: str, label: str, path: str):
    """The decoded source at ``path`` (as Python decodes it), or the exit code of a one-line error."""
    from lethe.verifier.sources import read_source

    try:
        return read_source(path)
    except FileNotFoundError:
        return _fail(command, f"{label} file not found: {path}")
    except (OSError, SyntaxError, UnicodeDecodeError, LookupError) as exc:
        return _fail(command, f"cannot read {label} file {path}: {type(exc).__name__}: {exc}")


def write_rows_locked(out: str | os.PathLike[str], rows: list[dict], *, append: bool) -> Path:
    """Write ``rows`` to the parquet file ``out`` (after the rows already there when ``append``), safely
    under concurrency and crashes.

    Parquet cannot be appended to in place, so an append is read, rewrite and rename. Two ``lethe verify
    --append`` runs doing that at once lose one of the rows (each rewrites what it read before the other
    wrote), and a reader of a half-written file sees a broken table. So the whole read-modify-write holds
    an exclusive ``flock`` on a lock file beside ``out``, and the new table is written to a temporary file
    in the same directory, fsynced and renamed over ``out`` (a rename within one file system is atomic), then
    the directory is fsynced so that the rename survives a crash."""
    from lethe.verifier import records

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    lock_path = out.with_name(f".{out.name}.lock")
    with open(lock_path, "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            old = records.read_rows(out) if (append and out.exists()) else []
            tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
            try:
                records.write_rows(old + list(rows), tmp)
                fd = os.open(tmp, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(tmp, out)
            finally:
                tmp.unlink(missing_ok=True)
            dfd = os.open(out.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    return out


def cmd_verify(args: argparse.Namespace) -> int:
    server = _server_socket(args)
    if server is None:
        from lethe.sandbox.runner import warm_up

        # The sandbox's zygotes import torch while this process reads the sources; this process never imports it
        # (it grades in a process forked from the CPU zygote: grade_isolated). The CPU zygote serves the reference
        # on the CPU, a Triton candidate's ahead-of-time pass and the grading; when the device is known without
        # importing torch, the candidate's is started too, which a reference on CUDA shares (same preload and
        # environment).
        warm_up("cpu")
        guess = args.device if args.device != "auto" else ("cuda" if os.path.exists("/dev/nvidiactl") else "cpu")
        if guess != "cpu":
            warm_up(guess, {"TRITON_INTERPRET": None})
    ref_src = _read("verify", "reference", args.ref)
    if isinstance(ref_src, int):
        return ref_src
    cand_src = _read("verify", "candidate", args.cand)
    if isinstance(cand_src, int):
        return cand_src
    if server is not None:
        from lethe import server as S

        try:
            ans = S.verify_via_server(server, args, ref_src, cand_src)
            code, out, err, row = ans["code"], ans["stdout"], ans["stderr"], ans["row"]
        except S.ServerError as exc:
            if not str(exc).startswith("no server"):
                from lethe.verifier.verdict import EXIT_HARNESS

                _fail("verify", str(exc))
                return EXIT_HARNESS
            # The server could not be started: verifying here gives the same answer, only slower.
            print(f"lethe verify: {exc}; {SERVER_FALLBACK}", file=sys.stderr)
            code, out, err, row = verify_sources(args, ref_src, cand_src)
    else:
        code, out, err, row = verify_sources(args, ref_src, cand_src)
    sys.stdout.write(out)
    sys.stderr.write(err)
    if args.out and row is not None:
        try:
            write_rows_locked(args.out, [row], append=args.append)
        except Exception as exc:  # noqa: BLE001 - the verdict is printed; say why it was not stored
            return _fail("verify", f"could not write {args.out}: {type(exc).__name__}: {exc}")
    return code


#: What ``lethe verify --server`` writes on stderr when no server could be reached or started and it verified in
#: its own process instead (the latency benchmark tells such an answer from a server's by it).
SERVER_FALLBACK = "verifying without the server"


def _server_socket(args: argparse.Namespace) -> Path | None:
    """The server socket this verification goes to (``--server``, or ``LETHE_SERVER`` set to anything but
    ``0``/empty), or None to verify in this process."""
    from lethe import server as S

    env = os.environ.get("LETHE_SERVER", "").strip()
    if getattr(args, "server", False):
        return S.socket_path(env if env.lower() not in ("", "0", "no", "false", "off") else None)
    if env and env.lower() not in ("0", "no", "false", "off"):
        return S.socket_path(env)
    return None


def verify_sources(args: argparse.Namespace, ref_src: str, cand_src: str) -> tuple[int, str, str, dict | None]:
    """Verify decoded sources under the parsed ``lethe verify`` options: (exit code, stdout text, stderr
    text, the row or None). The one body of ``lethe verify``, run by the CLI process or by ``lethe serve``,
    so that both print the same bytes and give the same row."""
    from lethe.verifier import api
    from lethe.verifier.report import escape, human_summary
    from lethe.verifier.verdict import EXIT_USAGE, Verdict

    gates = None
    if args.gates:
        from lethe.verifier.battery import GATE_IDS

        gates = [g.strip().upper() for g in args.gates.split(",") if g.strip()]
        unknown = [g for g in gates if g not in GATE_IDS]
        if unknown:
            msg = f"unknown gate(s) {', '.join(unknown)}; gates are {', '.join(GATE_IDS)}"
            return EXIT_USAGE, "", f"lethe verify: {escape(msg)}\n", None
    kw = dict(profile=args.profile, device=args.device, seed=args.seed, timeout_s=args.timeout,
              kernel_id=args.id or default_id(args.cand, cand_src), corpus=args.corpus,
              ref_timeout_s=args.ref_timeout, ref_memory_mb=args.ref_memory_mb,
              reference_device=args.reference_device, grade_isolated=True,
              sources={"ref_path": str(Path(args.ref)), "cand_path": str(Path(args.cand))})
    if args.tiered:
        if gates:
            msg = "--tiered and --gates exclude each other (the tiers choose the gates)"
            return EXIT_USAGE, "", f"lethe verify: {escape(msg)}\n", None
        from lethe.verifier.tiers import verify_tiered

        row, _decided = verify_tiered(ref_src, cand_src, **kw)
    else:
        row = api.verify(ref_src, cand_src, only_gates=gates, **kw)
    v = Verdict.from_row(row)
    if args.json:
        out = json.dumps(v.to_json(), sort_keys=True)
    else:
        out = human_summary(row, v.verdict, rows_path=args.out or None)
    return v.exit_code, out + "\n", "", row


def cmd_serve(args: argparse.Namespace) -> int:
    from lethe import server as S

    return S.run_server(S.socket_path(args.socket or None), args.idle_exit)


def default_id(cand_path: str, cand_src: str) -> str:
    """A row id that is unique per candidate: the file's stem plus the first 12 hex digits of the source's
    SHA-256 (every ``cand.py`` of a corpus would otherwise be called ``cand``)."""
    import hashlib

    return f"{Path(cand_path).stem}-{hashlib.sha256(cand_src.encode()).hexdigest()[:12]}"


def cmd_replay(args: argparse.Namespace) -> int:
    from lethe.verifier import api
    from lethe.verifier.report import escape

    if not Path(args.rows).is_file():
        return _fail("replay", f"rows file not found: {args.rows}")
    for label, path in (("reference", args.ref), ("candidate", args.cand)):
        if path is not None:
            got = _read("replay", label, path)
            if isinstance(got, int):
                return got
    row = _one_row("replay", args.rows, args.id, args.profile)
    if isinstance(row, int):
        return row
    try:
        res = api.replay(row, args.gate, ref_path=args.ref, cand_path=args.cand)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError) as exc:
        return _fail("replay", f"{type(exc).__name__}: {exc}")
    if args.json:
        print(json.dumps(res, sort_keys=True))
    else:
        rec, new = res["recorded"], res["replayed"]
        print(escape(f"{res['id']} {res['gate']}: recorded {rec['status']} (seed {rec['seed']}), "
                     f"replayed {new['status']} (seed {new['seed']})")
              + ("" if res["sources_match"] else "  [WARNING: sources changed since the row was written]"))
        if res["reproduces"]:
            print("reproduces")
        else:
            print(f"DOES NOT reproduce\n  recorded: {escape(rec['evidence'][:400])}\n"
                  f"  replayed: {escape(new['evidence'][:400])}")
    return 0 if res["reproduces"] else 1


def api_default(name: str):
    from lethe.verifier import api

    return getattr(api, name)


def build_parser() -> argparse.ArgumentParser:
    from lethe import __version__
    from lethe import server as server_defaults
    from lethe.verifier.battery import GATE_IDS
    from lethe.verifier.profiles import PROFILES
    from lethe.verifier.verdict import EXIT_CODES, VERIFY_OUTPUT_SCHEMA

    codes = "; ".join(f"{k} {v}" for k, v in EXIT_CODES.items())
    parser = argparse.ArgumentParser(prog="lethe", description="Contract-grade correctness verifier for GPU kernels.",
                                     epilog=f"exit codes: {codes}")
    parser.add_argument("--version", action="version", version=f"lethe {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    v = sub.add_parser("verify", help="verify one candidate against one KernelBench-style reference")
    v.add_argument("ref", help="reference source (defines Model, get_inputs, get_init_inputs)")
    v.add_argument("cand", help="candidate source (defines ModelNew)")
    v.add_argument("--profile", default="strict", choices=sorted(PROFILES))
    v.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    v.add_argument("--seed", type=int, default=0)
    v.add_argument("--timeout", type=float, default=300.0, help="candidate wall-clock budget in seconds")
    v.add_argument("--ref-timeout", type=float, default=api_default("REF_TIMEOUT_S"),
                   help="float64 reference wall-clock budget in seconds (default %(default)g)")
    v.add_argument("--ref-memory-mb", type=int, default=api_default("REF_MEMORY_MB"),
                   help="float64 reference memory budget in MB (default %(default)d)")
    v.add_argument("--reference-device", default="auto", choices=list(api_default("REFERENCE_DEVICES")),
                   help="where the float64 reference runs (auto: the CPU; cuda: the GPU, for a CUDA verification only)")
    v.add_argument("--id", default="", help="row id (default: candidate file stem + 12 hex digits of its SHA-256)")
    v.add_argument("--gates", default="", help="comma-separated gate ids to run (default: all twelve)")
    v.add_argument("--tiered", action="store_true",
                   help="the quick tier's gates first, the full battery only if they pass (same final verdict)")
    v.add_argument("--corpus", default="")
    v.add_argument("--json", action="store_true",
                   help=f"one JSON document ({VERIFY_OUTPUT_SCHEMA}): the verdict, per gate its status, margin "
                        "(largest err/tol) and failing probes, and `causes`: the failing gates grouped by root cause "
                        "(cause id, gates, probes, worst err/tol)")
    v.add_argument("--out", default="", help="write the verdict row to this parquet file")
    v.add_argument("--append", action="store_true",
                   help="with --out: append to an existing file (atomic; safe for concurrent runs)")
    v.add_argument("--server", action="store_true",
                   help="verify in a warm `lethe serve` (started if none runs; LETHE_SERVER=1 or =SOCKET "
                        "does the same); prints what verifying here would")
    v.set_defaults(func=cmd_verify)

    s = sub.add_parser("serve", help="a warm verifier for `lethe verify --server` (docs/sandbox.md)")
    s.add_argument("--socket", default="", help="socket path (default: $XDG_RUNTIME_DIR/lethe/serve.sock, "
                                                "else /tmp/lethe-<uid>/serve.sock)")
    s.add_argument("--idle-exit", type=float, default=server_defaults.DEFAULT_IDLE_EXIT_S,
                   help="exit after this many seconds without a request (default %(default)g)")
    s.set_defaults(func=cmd_serve)

    r = sub.add_parser("replay", help="re-run one gate of one recorded row from its seed")
    r.add_argument("rows", help="parquet file of verdict rows (lethe.verdict/1 or /2)")
    r.add_argument("id")
    r.add_argument("gate", choices=list(GATE_IDS))
    r.add_argument("--ref", default=None, help="reference path (default: the one recorded in the row)")
    r.add_argument("--cand", default=None, help="candidate path (default: the one recorded in the row)")
    r.add_argument("--profile", default=None, help="the row's profile, when several rows share the id")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=cmd_replay)

    for name in EXTRA_COMMANDS:
        try:
            importlib.import_module(name).add_subcommand(sub)
        except Exception as exc:  # noqa: BLE001 - one room's broken command must not take down the CLI
            print(f"lethe: subcommand module {name} unavailable: {exc}", file=sys.stderr)
    return parser


def main(argv: list[str] | None = None) -> int:
    from lethe.verifier.verdict import EXIT_HARNESS, EXIT_USAGE

    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse: --help/--version exit 0, usage errors exit 2
        return int(exc.code or 0) if exc.code in (0, None) else EXIT_USAGE
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("lethe: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the verifier's own failure: one line, exit 4, traceback on request
        if os.environ.get("LETHE_DEBUG"):
            raise
        from lethe.verifier.report import escape

        print(f"lethe {getattr(args, 'command', '')}: internal error: {escape(type(exc).__name__)}: "
              f"{escape(str(exc)[:400])} (set LETHE_DEBUG=1 for the traceback)", file=sys.stderr)
        return EXIT_HARNESS


if __name__ == "__main__":
    sys.exit(main())
