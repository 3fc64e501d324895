"""The symbolic path explorer the audit runs sglang's helpers with."""

from __future__ import annotations

import ast

import pytest
import z3

from specbound.audit import helper_paths
from specbound.proofs import core


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
    for i, p in enumerate(returned):
        found = core.satisfy(f"path {i}", {"a_nonneg": a >= 0, "b_nonneg": b >= 0,
                                           **{f"path[{j}]": c for j, c in enumerate(p.condition)}})
        assert found is not None
        m = found.model
        ca, cb = m.eval(a, True).as_long(), m.eval(b, True).as_long()
        assert m.eval(z3.IntVal(0) + p.value, True).as_long() == ns["f"](ca, cb)
    assert len({str(p.condition) for p in expl.paths}) == len(expl.paths)


def test_a_refuted_claim_gives_a_small_counterexample():
    x, y = z3.Ints("x y")
    v = helper_paths.prove("small", z3.Not(z3.And(x * y >= 12, x + y > 0)), [x >= 0, y >= 0], [x, y])
    assert v.status == "counterexample" and v.proof is None
    assert v.model["x"] == 1 and v.model["y"] == 12


def test_unsupported_is_reported_not_raised():
    hook = helper_paths.make_bool_hook()
    ns = _compile("def f(a):\n    return int(a) + 1\n", hook)
    a = z3.Int("a")
    expl = helper_paths.explore(hook, lambda: ns["f"](a), [a >= 0])
    assert expl.unsupported
    # Concretely the same function still runs (the grid fallback).
    assert ns["f"](3) == 4


def test_a_proved_claim_carries_the_cores_proof_of_it():
    """``proved`` only with the Proof the core issued for ``pre |- (path => goal)``."""
    a, b = z3.Ints("a b")
    v = helper_paths.prove("sum", a + b >= a, [a >= 0, b >= 0], [a, b], path=[a > 2])
    assert v.status == "proved" and core.is_proof(v.proof)
    assert v.proof.goal.eq(z3.Implies(z3.And(a > 2), a + b >= a))
    assert "pre[1]" in v.proof.hyps and set(v.proof.hyps) <= {"pre[0]", "pre[1]"}  # it needs b >= 0


def test_a_path_no_input_takes_proves_its_goal_vacuously_not_as_an_error():
    a = z3.Int("a")
    v = helper_paths.prove("dead path", a < 0, [a >= 0], [a], path=[a < 0])
    assert v.status == "proved"
    assert helper_paths.prove("live", a < 0, [a >= 0], [a]).status == "counterexample"


def test_a_verdict_says_proved_only_with_a_proof_made_by_the_core():
    with pytest.raises(ValueError, match="Proof made by the core"):
        helper_paths.Verdict("proved")
    with pytest.raises(ValueError, match="Proof made by the core"):
        helper_paths.Verdict("proved", proof=object())
    real = core.check("t", z3.Int("a") + 1 > z3.Int("a"))
    with pytest.raises(ValueError, match="Proof made by the core"):
        helper_paths.Verdict("counterexample", proof=real)
    with pytest.raises(ValueError, match="status"):
        helper_paths.Verdict("holds")


def test_unknown_is_never_a_proof(monkeypatch):
    """Out of rlimit the core answers unknown: the verdict is unknown, not proved."""
    x, y = z3.Ints("x y")
    hard = z3.Or(x * x * x + y * y * y != 33, x < -10**6)  # a sum of cubes Z3 cannot settle cheaply
    monkeypatch.setattr(helper_paths, "RLIMIT", 50)
    v = helper_paths.prove("hard", hard, [], [x, y])
    assert v.status == "unknown" and v.proof is None


def test_a_branch_of_unknown_feasibility_is_explored(monkeypatch):
    """The explorer asks the core whether each side of a test can be taken; an unknown answer
    keeps the branch (it is never skipped as infeasible)."""
    hook = helper_paths.make_bool_hook()
    ns = _compile("def f(a):\n    if a > 5:\n        return 1\n    return 0\n", hook)
    a = z3.Int("a")
    asked = []
    real = core.satisfy

    def counting(name, constraints, **kw):
        asked.append(name)
        return real(name, constraints, **kw)

    monkeypatch.setattr(core, "satisfy", counting)
    expl = helper_paths.explore(hook, lambda: ns["f"](a), [a >= 10])
    assert [p.value for p in expl.paths] == [1] and len(asked) == 2  # a <= 5 is infeasible under a >= 10

    def unknown(name, constraints, **kw):
        raise core.Unknown(name, "planted", 0.0, 0)

    monkeypatch.setattr(core, "satisfy", unknown)
    expl = helper_paths.explore(hook, lambda: ns["f"](a), [a >= 10])
    assert sorted(p.value for p in expl.paths) == [0, 1]


def test_a_failed_solver_query_is_raised_not_taken_for_the_helpers_raise(monkeypatch):
    """A helper that catches every exception cannot turn a failed query into one of its paths."""
    hook = helper_paths.make_bool_hook()
    ns = _compile("def f(a):\n    try:\n        if a > 5:\n            return 1\n    except Exception:\n"
                  "        return -1\n    return 0\n", hook)
    a = z3.Int("a")

    def broken(name, constraints, **kw):
        raise RuntimeError("solver query failed")

    monkeypatch.setattr(core, "satisfy", broken)
    with pytest.raises(RuntimeError, match="solver query failed"):
        helper_paths.explore(hook, lambda: ns["f"](a), [a >= 0])


def test_a_quantified_formula_is_refused_not_dropped():
    """The core does not send a quantified constraint to Z3: here it is an error, naming it."""
    a, i = z3.Ints("a i")
    forall = z3.ForAll([i], z3.Implies(i >= 0, a + i >= 0))
    hook = helper_paths.make_bool_hook()
    ns = _compile("def f(a):\n    return 1 if a >= 0 else 0\n", hook)
    with pytest.raises(helper_paths.QuantifiedFormula, match=r"pre\[1\]"):
        helper_paths.explore(hook, lambda: ns["f"](a), [a > -5, forall])
    with pytest.raises(helper_paths.QuantifiedFormula, match="quantifier"):
        helper_paths.prove("q", a >= 0, [forall], [a])
    with pytest.raises(helper_paths.QuantifiedFormula, match="goal"):
        helper_paths.prove("q", z3.And(a >= 0, forall), [], [a])
