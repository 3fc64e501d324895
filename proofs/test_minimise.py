"""The minimiser: the least failing bound of a monotone probe, each value made small with the
earlier ones kept, the result still a model of the constraints (asked through the core), and
a concrete case shrunk only to candidates the caller's predicate still fails."""

from __future__ import annotations

import pytest
import z3

from specbound.proofs import core, minimise

x, y = z3.Ints("x y")
CONSTRAINTS = {"nonneg": z3.And(x >= 0, y >= 0), "x_at_least_3": x >= 3, "sum": x + y >= 10}


def _no_bisection(probe, lo, hi, budget=None):
    """Planted: the bisection never moves."""
    return hi


@pytest.mark.parametrize("planted", [False, True], ids=["least", "planted"])
def test_least_is_the_least_bound_of_a_monotone_probe(monkeypatch, planted):
    if planted:
        monkeypatch.setattr(minimise, "least", _no_bisection)
    got = {t: minimise.least(lambda b, t=t: b if b >= t else None, 0, 1000) for t in range(1, 1001, 37)}
    assert (got == {t: t for t in got}) is not planted


@pytest.mark.parametrize("planted", [False, True], ids=["smallest_model", "planted"])
def test_each_value_is_made_small_with_the_earlier_ones_kept(monkeypatch, planted):
    if planted:
        monkeypatch.setattr(minimise, "least", _no_bisection)
    start = core.satisfy("start", CONSTRAINTS, extra=[x == 50, y == 50]).model
    got = minimise.smallest_model("small", CONSTRAINTS, {"x": x, "y": y}, first=start)
    assert core.satisfy("still_a_model", CONSTRAINTS, extra=[x == got["x"], y == got["y"]]) is not None
    assert (got == {"x": 3, "y": 7}) is not planted


def test_no_model_is_none_and_prefs_are_kept_unless_unsatisfiable():
    assert minimise.smallest_model("none", {**CONSTRAINTS, "small": x + y < 5}, {"x": x}) is None
    got = minimise.smallest_model("prefs", CONSTRAINTS, {"x": x, "y": y}, prefs=[x + y < 5])
    assert got == {"x": 3, "y": 7}
    assert minimise.smallest_model("kept", CONSTRAINTS, {"y": y, "x": x}, prefs=[x >= 5]) == {"y": 0, "x": 10}


def test_greedy_keeps_only_failing_candidates():
    fails = lambda c: "big" if c >= 7 else None  # noqa: E731
    case, verdict = minimise.greedy(100, lambda c: (c // 2, c - 1), fails)
    assert (case, verdict) == (7, "big")
    assert minimise.greedy(3, lambda c: (c - 1,), fails) == (3, None)
    case, _ = minimise.greedy(100, lambda c: (c // 2, c - 1), fails, budget=3)
    assert case > 7 and fails(case)
