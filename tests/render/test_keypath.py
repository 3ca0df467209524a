"""Key paths resolve exactly what they name and expressions cannot escape their sandbox."""

import pytest

from lethe.render.keypath import ExpressionError, KeyPathError, evaluate, resolve

DOC = {"a": {"b": [10, {"c": 3}]}, "cls": {"z": {"n": 2}, "y": {"n": 5}}, "CMP-03": 7}


def test_resolve_paths():
    assert resolve(DOC, "a.b[0]") == 10
    assert resolve(DOC, "a.b[1].c") == 3
    assert resolve(DOC, "CMP-03") == 7
    # wildcard walks dict values in sorted key order (y before z), independent of insertion order
    assert resolve(DOC, "cls.*.n") == [5, 2]


@pytest.mark.parametrize("path", ["a.x", "a.b[5]", "cls.*.m", "CMP-03.x"])
def test_missing_paths_raise(path):
    with pytest.raises(KeyPathError):
        resolve(DOC, path)


def test_expressions():
    assert evaluate("k / n", {"k": 1043, "n": 2638}) == 1043 / 2638
    assert evaluate("[min((F - a) / (N - b) for a, b in zip(f, n))]",
                    {"f": [1, 2], "n": [4, 8], "F": 10, "N": 20}) == [min(9 / 16, 8 / 12)]
    assert evaluate("ints(s)[:2]", {"s": "Required: 544, Hardware limit: 512"}) == [544, 512]
    assert evaluate("floats(s)", {"s": "a 1.1B model, 0.5 ms and -2"}) == [1.1, 0.5, -2.0]
    assert evaluate("sum(1 for g in s if 'fail' not in g)", {"s": [["pass"], ["fail", "pass"]]}) == 1
    assert abs(evaluate("exp(sum(log(x) for x in v) / len(v))", {"v": [1.0, 4.0, 16.0]}) - 4.0) < 1e-12
    assert evaluate("c['x'] + 1 if t else 0", {"c": {"x": 1}, "t": True}) == 2


@pytest.mark.parametrize("expr", ["__import__('os')", "open('x')", "a.__class__", "lambda: 1", "(x := 1)"])
def test_expressions_are_sandboxed(expr):
    with pytest.raises(ExpressionError):
        evaluate(expr, {"a": 1})
