"""Read a value out of an intermediate by a key path, and evaluate a small arithmetic expression over such values.

The claims ledger must never carry a hand-typed figure: every rendered value is looked up in a committed file at
render time. Key paths are written in ``paper/claims_spec.yaml``, so they need a compact, readable syntax:

- ``funnel.not_toolchain_artifact``: dict keys separated by dots;
- ``runs[0].closed_parity_scale_rel``: list indices in brackets;
- ``class_sensitivity.*.own_floor_rate``: ``*`` maps over every dict value (in sorted key order, so the result
  does not depend on file order) or every list item; each ``*`` adds one level of list nesting.

Expressions are parsed with :mod:`ast` and only arithmetic, comparisons, conditionals, list/tuple literals,
comprehensions and a few pure functions are allowed; there is no attribute access and no import, so a spec file
cannot run arbitrary code.
"""

from __future__ import annotations

import ast
import gzip
import json
import math
import operator
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

_TOKEN = re.compile(r"\[(\d+)\]|\.?([^.\[\]]+)")


class KeyPathError(KeyError):
    """A key path that does not resolve in the given document (the message names the missing step)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


def split_keypath(path: str) -> list[str | int]:
    steps: list[str | int] = []
    pos = 0
    while pos < len(path):
        m = _TOKEN.match(path, pos)
        if not m or m.end() == pos:
            raise KeyPathError(f"cannot parse key path {path!r} at position {pos}")
        steps.append(int(m.group(1)) if m.group(1) is not None else m.group(2))
        pos = m.end()
    return steps


def resolve(doc: Any, path: str) -> Any:
    """The value at ``path`` in ``doc`` (see module docstring for the syntax); KeyPathError when absent."""
    return _walk(doc, split_keypath(path), path, [])


def _walk(node: Any, steps: list[str | int], full: str, done: list[str]) -> Any:
    if not steps:
        return node
    step, rest = steps[0], steps[1:]
    where = ".".join(done) or "<root>"
    if step == "*":
        if isinstance(node, Mapping):
            return [_walk(node[k], rest, full, [*done, str(k)]) for k in sorted(node)]
        if isinstance(node, list):
            return [_walk(v, rest, full, [*done, f"[{i}]"]) for i, v in enumerate(node)]
        raise KeyPathError(f"{full}: '*' applied to a {type(node).__name__} at {where}")
    if isinstance(step, int):
        if not isinstance(node, list) or step >= len(node):
            raise KeyPathError(f"{full}: no index [{step}] at {where}")
        return _walk(node[step], rest, full, [*done, f"[{step}]"])
    if not isinstance(node, Mapping) or step not in node:
        raise KeyPathError(f"{full}: no key {step!r} at {where}")
    return _walk(node[step], rest, full, [*done, step])


def load_document(path: str | Path) -> Any:
    """Parse an intermediate: JSON, JSON Lines (optionally gzipped; a list of rows), YAML, or parquet.

    A parquet table becomes ``{"rows": [...], "columns": {name: [...]}}`` so key paths such as
    ``columns.status`` or ``rows[0].status`` work on it.
    """
    path = Path(path)
    name = path.name
    if name.endswith(".jsonl.gz") or name.endswith(".jsonl"):
        opener = gzip.open if name.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as fh:
            return [json.loads(line) for line in fh if line.strip()]
    if name.endswith(".json"):
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    if name.endswith((".yaml", ".yml")):
        import yaml

        with open(path, encoding="utf-8") as fh:
            return yaml.safe_load(fh)
    if name.endswith(".parquet"):
        import pandas as pd

        frame = pd.read_parquet(path)
        return {"rows": frame.to_dict("records"), "columns": {c: frame[c].tolist() for c in frame.columns}}
    raise ValueError(f"unsupported intermediate format: {path}")


def _ints(text: Any) -> list[int]:
    """All integers written in a string, in order (for figures that survive only inside a log line)."""
    return [int(t) for t in re.findall(r"-?\d+", str(text))]


def _floats(text: Any) -> list[float]:
    """All decimal numbers written in a string, in order ("a 1.1B model" gives [1.1]; a hyphen reads as minus)."""
    return [float(t) for t in re.findall(r"-?\d+(?:\.\d+)?", str(text))]


def _count(items: Any, value: Any) -> int:
    return sum(1 for x in items if x == value)


def _flatten(items: Any) -> list[Any]:
    out: list[Any] = []
    for x in items:
        if isinstance(x, list | tuple):
            out.extend(_flatten(x))
        else:
            out.append(x)
    return out


FUNCTIONS = {
    "abs": abs, "all": all, "any": any, "len": len, "max": max, "min": min, "round": round, "sorted": sorted,
    "sum": sum, "zip": lambda *a: list(zip(*a, strict=True)), "list": list, "int": int, "float": float,
    "ints": _ints, "floats": _floats, "count": _count, "flatten": _flatten, "isnan": math.isnan,
    "log": math.log, "exp": math.exp,  # a geometric mean over released rows: exp(sum(log(x)) / n)
}

_BINOPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_CMPOPS = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
    ast.GtE: operator.ge, ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}


class ExpressionError(ValueError):
    pass


def evaluate(expr: str, names: Mapping[str, Any]) -> Any:
    """Evaluate ``expr`` with ``names`` bound; only the constructs listed in the module docstring are allowed."""
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"cannot parse expression {expr!r}: {exc.msg}") from None
    return _Evaluator(dict(names)).visit(tree.body)


class _Evaluator:
    def __init__(self, names: dict[str, Any]):
        self.names = names

    def visit(self, node: ast.AST) -> Any:
        method = getattr(self, "visit_" + type(node).__name__, None)
        if method is None:
            raise ExpressionError(f"{type(node).__name__} is not allowed in a claim expression")
        return method(node)

    def visit_Constant(self, node: ast.Constant) -> Any:
        return node.value

    def visit_Name(self, node: ast.Name) -> Any:
        if node.id in self.names:
            return self.names[node.id]
        if node.id in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[node.id]
        raise ExpressionError(f"unknown name {node.id!r}")

    def visit_List(self, node: ast.List) -> list[Any]:
        return [self.visit(e) for e in node.elts]

    def visit_Tuple(self, node: ast.Tuple) -> list[Any]:
        return [self.visit(e) for e in node.elts]

    def visit_BinOp(self, node: ast.BinOp) -> Any:
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise ExpressionError(f"operator {type(node.op).__name__} is not allowed")
        return op(self.visit(node.left), self.visit(node.right))

    def visit_UnaryOp(self, node: ast.UnaryOp) -> Any:
        value = self.visit(node.operand)
        if isinstance(node.op, ast.USub):
            return -value
        if isinstance(node.op, ast.UAdd):
            return +value
        if isinstance(node.op, ast.Not):
            return not value
        raise ExpressionError(f"operator {type(node.op).__name__} is not allowed")

    def visit_BoolOp(self, node: ast.BoolOp) -> Any:
        values = [self.visit(v) for v in node.values]
        return all(values) if isinstance(node.op, ast.And) else any(values)

    def visit_Compare(self, node: ast.Compare) -> bool:
        left = self.visit(node.left)
        for op, comp in zip(node.ops, node.comparators, strict=True):
            right = self.visit(comp)
            fn = _CMPOPS.get(type(op))
            if fn is None:
                raise ExpressionError(f"comparison {type(op).__name__} is not allowed")
            if not fn(left, right):
                return False
            left = right
        return True

    def visit_IfExp(self, node: ast.IfExp) -> Any:
        return self.visit(node.body) if self.visit(node.test) else self.visit(node.orelse)

    def visit_Subscript(self, node: ast.Subscript) -> Any:
        target = self.visit(node.value)
        if isinstance(node.slice, ast.Slice):
            lo = self.visit(node.slice.lower) if node.slice.lower else None
            hi = self.visit(node.slice.upper) if node.slice.upper else None
            return target[lo:hi]
        return target[self.visit(node.slice)]

    def visit_Call(self, node: ast.Call) -> Any:
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            raise ExpressionError(f"only these functions are allowed: {sorted(FUNCTIONS)}")
        if node.keywords:
            raise ExpressionError("keyword arguments are not allowed")
        args = [self.visit(a) for a in node.args]
        return FUNCTIONS[node.func.id](*args)

    def _comprehension(self, node: ast.ListComp | ast.GeneratorExp) -> list[Any]:
        if len(node.generators) != 1:
            raise ExpressionError("only one 'for' per comprehension")
        gen = node.generators[0]
        if gen.is_async:
            raise ExpressionError("async comprehensions are not allowed")
        out = []
        saved = dict(self.names)
        try:
            for item in self.visit(gen.iter):
                self._bind(gen.target, item)
                if all(self.visit(cond) for cond in gen.ifs):
                    out.append(self.visit(node.elt))
        finally:
            self.names = saved
        return out

    visit_ListComp = _comprehension
    visit_GeneratorExp = _comprehension

    def _bind(self, target: ast.AST, value: Any) -> None:
        if isinstance(target, ast.Name):
            self.names[target.id] = value
        elif isinstance(target, ast.Tuple | ast.List):
            values = list(value)
            if len(values) != len(target.elts):
                raise ExpressionError("unpacking length mismatch")
            for t, v in zip(target.elts, values, strict=True):
                self._bind(t, v)
        else:
            raise ExpressionError("only names and tuples can be loop targets")
