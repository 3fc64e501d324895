"""Shrinking a model search on its own solver: the core's narrowing asks and the runner's
binary search to a Pareto-minimal model (:class:`specbound.proofs.theorem._Shrink`)."""

from __future__ import annotations

import z3

from specbound.proofs import core
from specbound.proofs import theorem as runner

x, y = z3.Ints("x y")
SOME = {"x_nonneg": x >= 0, "y_nonneg": y >= 0, "enough": x + y >= 10}


def _values(found):
    return [found.model.eval(v, model_completion=True).as_long() for v in (x, y)]


def test_an_unsat_narrowing_ask_is_taken_back():
    asks = [x > 1000, z3.And(x <= 3, x > 1000), x == 7]
    answered = []

    def narrow(last):
        answered.append(last is not None)
        return asks[len(answered) - 1] if len(answered) <= len(asks) else None

    found = core.satisfy("scoped", {"x_small": x <= 5000, **SOME}, narrow=narrow)
    # the second ask contradicts itself (unsat); x == 7 is sat only once that ask is taken
    # back, and only once the first ask (x > 1000) is too: each ask is the first query plus itself
    assert answered == [True, True, False, True]
    assert _values(found)[0] == 7


def test_an_unknown_narrowing_ask_keeps_the_last_model():
    hard = x * x * x + y * y * y == 3 * 10**6 + 1  # the nonlinear solver gives up within a tiny rlimit

    def narrow(last):
        return hard if last is not None else None

    found = core.satisfy("unknown-ask", {"small": z3.And(0 <= x, x <= 2, 0 <= y, y <= 2)}, narrow=narrow,
                         narrow_rlimit=1)
    assert found is not None and 0 <= _values(found)[0] <= 2


def test_the_shrink_ends_pareto_minimal():
    """Started far from the minimum (the first ask pins x = y = 40), the shrink reaches a model
    no other model of the constraints dominates: here x + y = 10."""
    shrink = runner._Shrink({"x": x, "y": y}, runner.MINIMISE_ROUNDS)
    started = []

    def narrow(last):
        if not started:
            started.append(True)
            return z3.And(x == 40, y == 40)
        return shrink(last)

    found = core.satisfy("pareto", SOME, narrow=narrow)
    assert shrink.minimal
    assert sum(_values(found)) == 10, _values(found)
