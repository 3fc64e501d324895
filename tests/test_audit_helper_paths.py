"""The symbolic path explorer the audit runs sglang's helpers with."""

from __future__ import annotations

import ast

import z3

from specbound.audit import helper_paths


def _compile(src: str, hook):
    tree = helper_paths.instrument(ast.parse(src))
    ast.fix_missing_locations(tree)
    ns = {"__sb_bool__": hook}
    exec(compile(tree, "<test>", "exec"), ns)
    return ns


def test_paths_of_branches_and_asserts():
    hook = helper_paths.make_bool_hook()
    ns = _compile("def f(a, b):\n"
                  "    assert a < 100, 'too big'\n"
                  "    if a > b and not b == 3:\n"
                  "        return a - b\n"
                  "    return 0 if a == b else b - a\n", hook)
    a, b = z3.Ints("a b")
    expl = helper_paths.explore(hook, lambda: ns["f"](a, b), [a >= 0, b >= 0])
    assert expl.unsupported is None
    returned = [p for p in expl.paths if p.returned]
    raised = [p for p in expl.paths if not p.returned]
    assert len(raised) == 1 and isinstance(raised[0].error, AssertionError)
    assert len(returned) == 4  # a>b,b!=3 / a>b,b==3 / a==b / a<b
    # Each path's value, at any input on that path, is what the function computes concretely.
    for p in returned:
        s = z3.Solver()
        s.add(a >= 0, b >= 0, *p.condition)
        assert s.check() == z3.sat
        m = s.model()
        ca, cb = m.eval(a, True).as_long(), m.eval(b, True).as_long()
        assert m.eval(z3.IntVal(0) + p.value, True).as_long() == ns["f"](ca, cb)
    assert len({str(p.condition) for p in expl.paths}) == len(expl.paths)


def test_refute_gives_a_small_counterexample():
    x, y = z3.Ints("x y")
    v = helper_paths.refute([x >= 0, y >= 0, x * y >= 12, x + y > 0], [x, y])
    assert v.status == "counterexample"
    assert v.model["x"] == 1 and v.model["y"] == 12


def test_unsupported_is_reported_not_raised():
    hook = helper_paths.make_bool_hook()
    ns = _compile("def f(a):\n    return int(a) + 1\n", hook)
    a = z3.Int("a")
    expl = helper_paths.explore(hook, lambda: ns["f"](a), [a >= 0])
    assert expl.unsupported
    # Concretely the same function still runs (the grid fallback).
    assert ns["f"](3) == 4
