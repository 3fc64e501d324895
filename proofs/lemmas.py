"""Lemmas the theorems cite: prefix-sum facts by induction, and small nonlinear
arithmetic facts that Z3 proves alone but not always inside a larger goal.

Each lemma is proved once per process (cached) and used through
:func:`kernel.instantiate`, so every theorem's own query stays quantifier free.
"""

from __future__ import annotations

from functools import cache

import z3

from specbound.spec import Condition, batch_size_ok, context_ok

from . import kernel
from .model import C, D, K, P, Q, bs, draft_room_conds, labelled, per_request, positions_definition
from .model import prefix_definition, seq_len, seq_len_conds

# --- arithmetic ------------------------------------------------------------------------


@cache
def mul_le_mono():
    """``0 <= x <= y /\\ z >= 0  =>  x*z <= y*z``."""
    return kernel.check_forall(
        "L-MUL-LE-MONO",
        lambda x, y, z: z3.Implies(z3.And(0 <= x, x <= y, z >= 0), x * z <= y * z), 3)


@cache
def cdiv_covers():
    """``p >= 1 /\\ x >= 0  =>  ((x + p - 1) div p) * p >= x``: ceil-division rounds up."""
    return kernel.check_forall(
        "L-CDIV-COVERS",
        lambda x, p: z3.Implies(z3.And(p >= 1, x >= 0), ((x + p - 1) / p) * p >= x), 2)


@cache
def div_of_row():
    """``k >= 1 /\\ 0 <= t < k /\\ r >= 0  =>  (r*k + t) div k = r``."""
    return kernel.check_forall(
        "L-DIV-OF-ROW",
        lambda r, k, t: z3.Implies(z3.And(k >= 1, 0 <= t, t < k, r >= 0), (r * k + t) / k == r), 3)


@cache
def succ_times():
    """``(x + 1) * y = x*y + y``: lets congruence see that Q((k+1)*K) is Q(k*K + K)."""
    return kernel.check_forall("L-SUCC-TIMES", lambda x, y: (x + 1) * y == x * y + y, 2)


# --- prefix sums (induction over the request index) ------------------------------------

def _step_hyps(k, *per_request_conds):
    hyps = labelled(batch_size_ok(bs))
    hyps.update(labelled(context_ok(C)))
    hyps.update(prefix_definition(k, "k"))
    hyps.pop("prefix_zero")
    for conds in (seq_len_conds, *per_request_conds):
        hyps.update(per_request(conds, k, "k"))
    return hyps


_BASE = {"prefix_zero": P(0) == 0}


@cache
def prefix_bound():
    """VM-PREFIX-BOUND: ``forall v. 0 <= v <= bs => 0 <= P(v) <= v*C``."""
    return kernel.induct(
        "VM-PREFIX-BOUND", prefix_bound_phi, base_hyps=lambda: _BASE,
        step_hyps=lambda k: _step_hyps(k))


def prefix_bound_phi(v):
    return z3.Implies(v <= bs, z3.And(0 <= P(v), P(v) <= v * C))


@cache
def prefix_monotone():
    """``forall v, a. 0 <= a <= v <= bs => P(a) <= P(v)`` (every seq_len >= 0)."""
    def phi(v, a):
        return z3.Implies(z3.And(0 <= a, a <= v, v <= bs), P(a) <= P(v))
    return kernel.induct("L-PREFIX-MONOTONE", phi, arity=1,
                         step_hyps=lambda k, a: _step_hyps(k))


@cache
def prefix_room():
    """``forall v. 0 <= v <= bs => P(v) + v*D <= v*C`` when every request has room for its
    D draft tokens (``seq_len[b] + D <= C``)."""
    def phi(v):
        return z3.Implies(v <= bs, P(v) + v * D <= v * C)
    return kernel.induct("L-PREFIX-ROOM", phi, base_hyps=lambda: _BASE,
                         step_hyps=lambda k: _step_hyps(k, draft_room_conds))


def at_context_conds(i):
    """The worst-case batch: every request at the full context."""
    return (Condition("seq_len_at_context", "seq_len[b] = max_context_len (worst case)",
                      seq_len(i) == C, "seq_len[b]"),)


@cache
def prefix_at_context():
    """``forall v. 0 <= v <= bs => P(v) = v*C`` when every ``seq_len = C``."""
    def phi(v):
        return z3.Implies(v <= bs, P(v) == v * C)
    return kernel.induct("L-PREFIX-AT-CONTEXT", phi, base_hyps=lambda: _BASE,
                         step_hyps=lambda k: _step_hyps(k, at_context_conds))


@cache
def positions_within_request():
    """``forall t, r. 0 <= t <= K /\\ r >= 0 => Q(r*K + t) = Q(r*K) + t*seq_len(r)``:
    each of request r's K branches adds ``seq_len(r)`` to the positions prefix."""
    def phi(tt, r):
        return z3.Implies(z3.And(tt <= K, r >= 0), Q(r * K + tt) == Q(r * K) + tt * seq_len(r))

    def step_hyps(k, r):
        hyps = positions_definition(r * K + k, "rK+k")
        hyps.pop("positions_zero")
        hyps["topk_positive"] = K >= 1
        return hyps
    return kernel.induct("L-POSITIONS-WITHIN-REQUEST", phi, arity=1, step_hyps=step_hyps,
                         step_by=lambda k, r: [kernel.instantiate(div_of_row(), r, K, k)])


@cache
def positions_prefix():
    """``forall v. 0 <= v <= bs => Q(v*K) = K*P(v)``."""
    def phi(v):
        return z3.Implies(v <= bs, Q(v * K) == K * P(v))

    def step_hyps(k):
        hyps = prefix_definition(k, "k")
        hyps.pop("prefix_zero")
        hyps["topk_positive"] = K >= 1
        return hyps
    return kernel.induct(
        "L-POSITIONS-PREFIX", phi,
        base_hyps=lambda: {"prefix_zero": P(0) == 0, "positions_zero": Q(0) == 0},
        step_hyps=step_hyps,
        step_by=lambda k: [kernel.instantiate(positions_within_request(), K, k),
                           kernel.instantiate(succ_times(), k, K)])
