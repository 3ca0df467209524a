"""The house rules of the repository, checked by reading the tree (``ast``, ``tokenize``, regular expressions):
nothing here imports torch or any module under test, so the whole file runs in a few seconds.

One test per rule. Each says what must hold and why; each fails on a single violating line (a call to
``spec_from_file_location`` in a test, an experiment of 301 lines, a ``torch.cuda.Event`` outside the timing
module, ``results/native/profile/call18/profile.json`` in a rule, a module-level import that closes a cycle,
``import kernels``). docs/ARCHITECTURE.md lists them.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
THIS = Path(__file__).resolve()

# Python trees of the project (src/lethe/kernels is a symlink to kernels/, read once as kernels/).
PY_TREES = ("src", "kernels", "experiments", "workflow/scripts", "tests", "tools")


def _rel(p: Path) -> str:
    return p.relative_to(ROOT).as_posix()


@lru_cache(maxsize=None)
def _py_files() -> tuple[Path, ...]:
    out = []
    for tree in PY_TREES:
        for p in sorted((ROOT / tree).rglob("*.py")):
            rel = _rel(p)
            if rel.startswith("src/lethe/kernels/") or p.resolve() == THIS:
                continue
            out.append(p)
    return tuple(out)


@lru_cache(maxsize=None)
def _ast(p: Path) -> ast.Module:
    return ast.parse(p.read_text(encoding="utf-8"), str(p))


# ---------------------------------------------------------------------------------------------------------------
# 1. Nothing is loaded by path.

# Importing a file by its location (or putting a folder on sys.path to reach it) bypasses the package: the loaded
# copy is not the installed module, a second copy can exist beside it, and the code only works from one
# checkout layout. Code that must load files it does not own is the exception, each listed with its reason:
PATH_LOADING_ALLOWED = {
    # untrusted candidate and reference sources, or the extensions built from them (the verifier's job)
    "src/lethe/sandbox/extensions.py": "imports a candidate's prebuilt torch extension from the shared build cache",
    "src/lethe/repro/standalone.py": "imports a repro case's candidate/reference source files as fresh modules",
    "src/lethe/repro/template.py": "the generated standalone repro test puts its own folder (the case) on sys.path",
    "src/lethe/corpora/sakana.py": "the generated candidate module loads its prebuilt CUDA extension",
    "src/lethe/sandbox/zygote.py": "a forked sandbox child sets sys.path[0] to the run folder, as `python -m` would",
    "tests/sandbox/test_hostile.py": "imports data/hostile/ref.py, the hostile suite's reference (a data file)",
    "tests/sandbox/test_zygote.py": "imports data/hostile/ref.py, the hostile suite's reference (a data file)",
    # third-party code at a pinned checkout, or its build, imported unmodified in a worker process
    "src/lethe/audit/latency.py": "a KernelBench checkout, to time KernelBench's own eval (child process)",
    "src/lethe/kernelbench/agreement.py": "a KernelBench checkout, to import its eval_kernel_against_ref",
    "src/lethe/kernelbench/real.py": "the judge worker's extra paths (a KernelBench checkout, built extensions)",
    "src/lethe/aot/mamba904.py": "the pinned mamba-ssm source tree, compiled by a per-Triton worker",
    "src/lethe/perf/mamba_ssm.py": "the built mamba-ssm extension and its package folder",
}

_LOADER_NAMES = {"spec_from_file_location", "SourceFileLoader", "SourcelessFileLoader", "ExtensionFileLoader",
                 "run_path"}
# the same calls inside a string: code generated to run elsewhere (a template, a ``python -c`` program)
_LOADER_TEXT = re.compile(r"\bsys\.path\.(?:insert|append|extend)\(|\bsys\.path\[[^\]]*\]\s*=|"
                          r"\b(?:spec_from_file_location|SourceFileLoader|ExtensionFileLoader|run_path)\(")


def _is_sys_path(node: ast.AST) -> bool:
    if isinstance(node, ast.Subscript):
        node = node.value
    return (isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name)
            and node.value.id == "sys")


def _path_loading(tree: ast.Module) -> list[tuple[int, str]]:
    hits = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and n.attr in _LOADER_NAMES:
            hits.append((n.lineno, n.attr))
        elif isinstance(n, ast.Name) and n.id in _LOADER_NAMES:
            hits.append((n.lineno, n.id))
        elif isinstance(n, ast.ImportFrom) and any(a.name in _LOADER_NAMES for a in n.names):
            hits.append((n.lineno, f"from {n.module} import ..."))
        elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and _is_sys_path(n.func.value)
              and n.func.attr in ("insert", "append", "extend", "__setitem__")):
            hits.append((n.lineno, f"sys.path.{n.func.attr}"))
        elif isinstance(n, (ast.Assign, ast.AugAssign)) and any(
                _is_sys_path(t) for t in (n.targets if isinstance(n, ast.Assign) else [n.target])):
            hits.append((n.lineno, "sys.path assignment"))
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and _LOADER_TEXT.search(n.value):
            hits.append((n.lineno, "path loading inside a string: " + _LOADER_TEXT.search(n.value).group(0)))
    return sorted(hits)


def test_no_file_is_loaded_by_path():
    """No module of src/, kernels/, experiments/, workflow/scripts/, tests/ or tools/ imports a file by its path
    (``importlib.util.spec_from_file_location``, ``SourceFileLoader``, ``runpy.run_path``) or edits ``sys.path``,
    in its own code or in code it generates. Project modules are reached by import: the package installs as
    ``lethe`` and the repository root is on pytest's path, so a test imports ``experiments.<exp>.<script>``
    or ``tools.<name>``. A path-loaded copy is a second module beside the installed one and ties the code to one
    checkout layout. The allowlist holds the code whose job is to load files the project does not own
    (candidates, references, built extensions, pinned third-party checkouts); an entry that no longer loads
    anything fails too, so the list stays exact."""
    found = {_rel(p): hits for p in _py_files() if (hits := _path_loading(_ast(p)))}
    bad = {f: h for f, h in found.items() if f not in PATH_LOADING_ALLOWED}
    assert not bad, "files loaded by path (import the module instead):\n" + "\n".join(
        f"  {f}:{line}: {what}" for f, hits in bad.items() for line, what in hits)
    stale = sorted(set(PATH_LOADING_ALLOWED) - set(found))
    assert not stale, f"allowlisted but loading nothing by path any more (drop them): {stale}"


# ---------------------------------------------------------------------------------------------------------------
# 2. Experiments are drivers.

MAX_EXPERIMENT_LINES = 300


def test_no_experiment_script_is_over_300_lines():
    """Every experiments/**/*.py is at most 300 lines. An experiment script is a driver: arguments, the calls
    into the package, the result file. Logic that needs more room belongs in the package, where it is imported
    (never loaded by path), tested and shared; a long script is where copied helpers and private timing loops
    accumulate."""
    long = {_rel(p): n for p in sorted((ROOT / "experiments").rglob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_EXPERIMENT_LINES}
    assert not long, f"experiment scripts over {MAX_EXPERIMENT_LINES} lines (move the logic into src/lethe): {long}"


# ---------------------------------------------------------------------------------------------------------------
# 3. One timing loop.

TIMING_MODULE = "src/lethe/perf/timing.py"
_EVENT_TEXT = re.compile(r"\bcuda\.Event\(|\.elapsed_time\(")


def _cuda_event_timing(tree: ast.Module) -> list[tuple[int, str]]:
    hits = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and n.attr == "Event" and (
                (isinstance(n.value, ast.Attribute) and n.value.attr == "cuda")
                or (isinstance(n.value, ast.Name) and n.value.id == "cuda")):
            hits.append((n.lineno, "cuda.Event"))
        elif isinstance(n, ast.Attribute) and n.attr == "elapsed_time":
            hits.append((n.lineno, ".elapsed_time"))
        elif isinstance(n, ast.ImportFrom) and (n.module or "").startswith("torch.cuda") and any(
                a.name == "Event" for a in n.names):
            hits.append((n.lineno, f"from {n.module} import Event"))
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and _EVENT_TEXT.search(n.value):
            hits.append((n.lineno, "inside a string: " + _EVENT_TEXT.search(n.value).group(0)))
    return sorted(hits)


def test_cuda_event_timing_lives_only_in_the_timing_module():
    """``torch.cuda.Event`` and ``elapsed_time`` appear only in src/lethe/perf/timing.py. GPU times in the paper
    come from one loop (warm-up, events around each repetition, the statistics); a copied loop drifts from it
    (different warm-up, no synchronisation, another statistic) and its numbers are no longer comparable. Every
    benchmark calls lethe.perf.timing instead."""
    found = {_rel(p): hits for p in _py_files() if (hits := _cuda_event_timing(_ast(p)))}
    assert TIMING_MODULE in found, "the timing module no longer uses CUDA events: update this test"
    bad = {f: h for f, h in found.items() if f != TIMING_MODULE}
    assert not bad, "CUDA-event timing outside lethe.perf.timing (call it instead):\n" + "\n".join(
        f"  {f}:{line}: {what}" for f, hits in bad.items() for line, what in hits)


# ---------------------------------------------------------------------------------------------------------------
# 4. Rules read results by name.

# A device-call folder (call18, call_3, call{n}, call*) or a bare "call" prefix used to pick such folders.
_CALL = re.compile(r"(?<![A-Za-z])call(?:[_-]?(?:\d+|\{|\*)|[_-]?$)")
# A commit sha in a file or folder name: "_c903c69", "-45d2c98", or the whole component (7-40 hex digits with at
# least one digit and one letter, as docs' diary check has it).
_SHA = re.compile(r"(?:^|[_\-.])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![0-9A-Za-z])")
# Directory listings: any of these on a statement that names results/ reads whatever folders happen to be there.
_LISTERS = {"glob", "iglob", "glob_wildcards", "listdir", "scandir", "walk", "iterdir", "rglob"}


def _rule_files() -> list[Path]:
    files = [ROOT / "Snakefile", ROOT / "workflow" / "Snakefile", *sorted((ROOT / "workflow/rules").glob("*.smk"))]
    return [f for f in files if f.exists()]


def _names_results(s: str) -> bool:
    return "results" in re.split(r"[/\\]", s)


def _bad_components(s: str) -> list[str]:
    return [c for c in re.split(r"[/\\]", s) if _CALL.search(c) or _SHA.search(c)]


_QUOTED = re.compile(r"^([A-Za-z]*)(\"\"\"|'''|\"|')(.*)\2$", re.DOTALL)


def _statements(text: str):
    """(first line, strings, names, assigned name) of each logical line of a Python-like file (Snakefiles
    tokenize as Python). Strings are unquoted; the names include those inside f-string fields."""
    strings: list[str] = []
    names: list[str] = []
    toks: list[str] = []
    start = None
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING):
            continue
        if tok.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
            if start is not None:
                assigned = toks[0] if len(toks) > 1 and toks[1] == "=" and toks[0].isidentifier() else None
                yield start, strings, names, assigned
            strings, names, toks, start = [], [], [], None
            continue
        start = tok.start[0] if start is None else start
        toks.append(tok.string)
        if tok.type == tokenize.STRING:
            m = _QUOTED.match(tok.string)
            body = m.group(3) if m else tok.string
            strings.append(body)
            if m and "f" in m.group(1).lower():
                names += re.findall(r"\{\s*([A-Za-z_]\w*)", body)
        elif tok.type == getattr(tokenize, "FSTRING_MIDDLE", -1):
            strings.append(tok.string)
        elif tok.type == tokenize.NAME:
            names.append(tok.string)


def _rule_violations(text: str) -> list[tuple[int, str]]:
    stmts = list(_statements(text))
    # names assigned from something that names results/ (a folder constant, a lookup in config's `results:`),
    # and names assigned from those
    bound: set[str] = set()
    while True:
        new = {a for _, strings, names, a in stmts
               if a and a not in bound and (any(map(_names_results, strings)) or bound & set(names[1:]))}
        if not new:
            break
        bound |= new
    hits = []
    for line, strings, names, _ in stmts:
        on_results = any(map(_names_results, strings)) or bool(bound & set(names))
        for s in strings:
            for c in _bad_components(s):
                if _CALL.search(c) or on_results:
                    hits.append((line, f"{s!r} names {c!r}"))
        if on_results and (listers := _LISTERS & set(names)):
            hits.append((line, f"lists a results folder ({', '.join(sorted(listers))})"))
    return hits


def _config_strings(doc):
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _config_strings(k)
            yield from _config_strings(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from _config_strings(v)
    elif isinstance(doc, str):
        yield doc


@pytest.mark.parametrize("kind", ["rules", "config"])
def test_rules_and_config_read_results_by_name(kind):
    """No rule file (Snakefile, workflow/rules/*.smk) and no config file (config/*.yaml) names a device-call
    folder (``call18``, ``call{n}``) or a sha-named result (``results/gdn/fla_compare_c903c69``), nor lists a
    results folder (``glob``, ``glob_wildcards``, ``os.listdir``, ``iterdir`` on a statement that names
    results/). Each experiment has one current result under a name that says what it holds, read through
    lethe.results (its runs and history.jsonl beside it), and the paths are written in config or the rule. A rule
    that reads a call folder renders whichever run sits there; a listing picks up stray run files. Shas outside
    results/ (a pinned third-party checkout such as kernelbench-<sha>) are inputs, not results, and allowed."""
    hits = []
    if kind == "rules":
        for f in _rule_files():
            hits += [f"{_rel(f)}:{line}: {what}" for line, what in _rule_violations(f.read_text(encoding="utf-8"))]
    else:
        yaml = pytest.importorskip("yaml")
        for f in sorted((ROOT / "config").glob("*.yaml")):
            for s in _config_strings(yaml.safe_load(f.read_text(encoding="utf-8"))):
                bad = [c for c in _bad_components(s) if _CALL.search(c) or _names_results(s)]
                hits += [f"{_rel(f)}: {s!r} names {c!r}" for c in bad]
    assert not hits, "results read by call/sha folder or by listing (name the current result instead):\n  " + \
        "\n  ".join(hits)


def test_rule_check_catches_call_and_sha_folders():
    """The check above, on lines it must reject and lines it must accept."""
    bad = ['ceilings="results/native/profile/call18/profile.json",',
           'x = f"results/gdn/scalar_gate/call{n}/scalar_gate_bench.json"',
           'r = "results/gdn/fla_compare_c903c69/summary.json"',
           'P = sorted(glob.glob("results/native/profile/*/profile.json"))',
           'D = os.path.join(workflow.basedir, "results", "gdn")\nF = [f for f in os.listdir(D)]',
           'S = [d for d in os.listdir(ROOT) if d.startswith("call")]',
           'input: glob_wildcards("results/audit/{corpus}/rows.parquet").corpus']
    good = ['kb = "../shared/third_party/kernelbench-48642c5c"',
            'result="results/native/profile/profile.json",',
            'g = glob.glob(os.path.join(workflow.basedir, "data", suite, "*", "*.py"))',
            '# never found by globbing results/call18']
    for src in bad:
        assert _rule_violations(src + "\n"), src
    for src in good:
        assert not _rule_violations(src + "\n"), src


# ---------------------------------------------------------------------------------------------------------------
# 5. No import cycle.

def _lethe_modules() -> dict[str, Path]:
    """Module name -> file, for src/lethe and kernels/ (installed as lethe.kernels)."""
    out = {}
    for base, prefix in ((ROOT / "src" / "lethe", ("lethe",)), (ROOT / "kernels", ("lethe", "kernels"))):
        for p in sorted(base.rglob("*.py")):
            rel = p.relative_to(base)
            if prefix == ("lethe",) and rel.parts[0] == "kernels":
                continue
            parts = prefix + rel.with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def _module_level_imports(body):
    """Import statements that run when the module is imported: not inside a function, nor under TYPE_CHECKING."""
    for n in body:
        if isinstance(n, (ast.Import, ast.ImportFrom)):
            yield n
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        elif isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test):
            yield from _module_level_imports(n.orelse)
        else:
            for field in ("body", "orelse", "finalbody", "handlers"):
                sub = getattr(n, field, None)
                if isinstance(sub, list):
                    yield from _module_level_imports([s for s in sub if isinstance(s, ast.stmt | ast.excepthandler)])


def _ancestors(mod: str) -> set[str]:
    parts = mod.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def _import_graph(mods: dict[str, Path], trees: dict[str, ast.Module] | None = None) -> dict[str, set[str]]:
    """Edges module -> lethe module it imports at module level. Importing a.b.c also runs a and a.b, so an edge
    goes to each package above the target too, except the importer's own packages (already being imported)."""
    graph = {}
    for name, path in mods.items():
        tree = (trees or {}).get(name) or _ast(path)
        pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for n in _module_level_imports(tree.body):
            if isinstance(n, ast.Import):
                targets |= {a.name for a in n.names if a.name in mods}
                continue
            base = n.module or ""
            if n.level:
                up = pkg.split(".")[: len(pkg.split(".")) - (n.level - 1)]
                base = ".".join(up + ([n.module] if n.module else []))
            for a in n.names:
                if f"{base}.{a.name}" in mods:
                    targets.add(f"{base}.{a.name}")
                elif base in mods:
                    targets.add(base)
        for t in list(targets):
            targets |= {a for a in _ancestors(t) if a in mods and a not in _ancestors(name)}
        targets.discard(name)
        graph[name] = targets
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_no_import_cycle_among_lethe_modules():
    """The module-level imports among lethe.* (src/lethe and kernels/, which installs as lethe.kernels) form no
    cycle. In a cycle, whichever module is imported first sees the other half-initialised: a name it imports at
    the top may not exist yet, so the result depends on import order (a test passes alone and fails in the
    suite). Imports inside functions run later and are how a genuine two-way dependency is broken; a package's
    __init__ importing its own submodules counts like any other import."""
    mods = _lethe_modules()
    graph = _import_graph(mods)
    assert sum(map(len, graph.values())) > 100, "the import graph came out nearly empty: the scan is broken"
    cycles = _cycles(graph)
    assert not cycles, "import cycles (move one import into the function that needs it):\n" + "\n".join(
        "  " + "; ".join(f"{m} -> {sorted(graph[m] & set(c))}" for m in c) for c in cycles)


def test_cycle_check_catches_a_cycle():
    """The check above on a planted two-module cycle, and on the same modules when one import is deferred."""
    mods = {"lethe": Path("__init__.py"), "lethe.a": Path("a.py"), "lethe.b": Path("b.py")}
    cyclic = {"lethe": ast.parse(""), "lethe.a": ast.parse("from lethe import b"),
              "lethe.b": ast.parse("import lethe.a\n")}
    deferred = dict(cyclic, **{"lethe.b": ast.parse("def f():\n    import lethe.a\n")})
    assert _cycles(_import_graph(mods, cyclic)) == [["lethe.a", "lethe.b"]]
    assert _cycles(_import_graph(mods, deferred)) == []


# ---------------------------------------------------------------------------------------------------------------
# 6. One importable package.

def _imports_top_level_kernels(tree: ast.Module) -> list[int]:
    lines = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Import) and any(a.name == "kernels" or a.name.startswith("kernels.") for a in n.names):
            lines.append(n.lineno)
        elif isinstance(n, ast.ImportFrom) and n.level == 0 and (
                n.module == "kernels" or (n.module or "").startswith("kernels.")):
            lines.append(n.lineno)
        elif (isinstance(n, ast.Call) and n.args and isinstance(n.args[0], ast.Constant)
              and isinstance(n.args[0].value, str) and re.match(r"kernels(\.|$)", n.args[0].value)
              and ((isinstance(n.func, ast.Attribute) and n.func.attr == "import_module")
                   or (isinstance(n.func, ast.Name) and n.func.id in ("import_module", "__import__")))):
            lines.append(n.lineno)
    return sorted(lines)


def test_kernels_is_reached_only_as_lethe_kernels():
    """No code imports a top-level ``kernels`` (``import kernels.gdn``, ``from kernels.mamba import ...``,
    ``import_module("kernels...")``): the kernels/ folder installs as ``lethe.kernels`` and nothing but ``lethe``
    is at the top of the installed namespace (PyPI's ``kernels`` is another project). The install side is
    tests/test_packaging.py (test_every_package_folder_is_listed: kernels/ maps to lethe.kernels;
    test_wheel_installs_and_runs_in_a_fresh_venv: the wheel's only top-level name is lethe); this is the
    source side: an ``import kernels`` works from the repository root (it is on pytest's path) and breaks in
    every installed copy."""
    hits = {_rel(p): lines for p in _py_files() if (lines := _imports_top_level_kernels(_ast(p)))}
    assert not hits, f"top-level `kernels` imports (use lethe.kernels): {hits}"
