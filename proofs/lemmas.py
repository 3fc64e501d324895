"""Lemmas the theorems cite: prefix-sum facts by induction, and small nonlinear
arithmetic facts that Z3 proves alone but not always inside a larger goal.

Each lemma is proved once per process (cached) and used through
:func:`core.instantiate`, so every theorem's own query stays quantifier free.  The
prefix-sum lemmas are sequents: their hypotheses are the per-request preconditions of a
batch of ``size`` requests (quantified), discharged by a citing check that has the same
ones.
"""

from __future__ import annotations

from functools import cache

import z3

from specbound.spec import batch_size_ok, context_ok

from . import core
from .model import (
    C, D, K, P, PREFIX_ZERO, POSITIONS_ZERO, Q, at_context_conds, bs, draft_room_conds, instances,
    labelled, per_request, positions_at, prefix_at, seq_len, seq_len_conds,
)

# --- arithmetic ------------------------------------------------------------------------


@cache
def mul_le_mono():
    """``0 <= x <= y /\\ z >= 0  =>  x*z <= y*z``."""
    return core.check_forall(
        "L-MUL-LE-MONO",
        lambda x, y, z: z3.Implies(z3.And(0 <= x, x <= y, z >= 0), x * z <= y * z), 3)


@cache
def cdiv_covers():
    """``p >= 1 /\\ x >= 0  =>  ((x + p - 1) div p) * p >= x``: ceil-division rounds up."""
    return core.check_forall(
        "L-CDIV-COVERS",
        lambda x, p: z3.Implies(z3.And(p >= 1, x >= 0), ((x + p - 1) / p) * p >= x), 2)


@cache
def div_of_row():
    """``k >= 1 /\\ 0 <= t < k /\\ r >= 0  =>  (r*k + t) div k = r``."""
    return core.check_forall(
        "L-DIV-OF-ROW",
        lambda r, k, t: z3.Implies(z3.And(k >= 1, 0 <= t, t < k, r >= 0), (r * k + t) / k == r), 3)


@cache
def div_le_mono():
    """``p >= 1 /\\ 0 <= x <= y  =>  (x div p) * p <= (y div p) * p``: rounding down to a page
    keeps the order."""
    return core.check_forall(
        "L-DIV-LE-MONO",
        lambda x, y, p: z3.Implies(z3.And(p >= 1, 0 <= x, x <= y), (x / p) * p <= (y / p) * p), 3)


@cache
def succ_times():
    """``(x + 1) * y = x*y + y``: lets congruence see that Q((k+1)*K) is Q(k*K + K)."""
    return core.check_forall("L-SUCC-TIMES", lambda x, y: (x + 1) * y == x * y + y, 2)


# --- prefix sums (induction over the request index) ------------------------------------

def batch_hyps(size=bs, *per_request_conds) -> dict:
    """The preconditions the prefix lemmas assume for a batch of ``size`` requests."""
    hyps = labelled(batch_size_ok(size, name=str(size)))
    hyps.update(labelled(context_ok(C)))
    hyps.update(per_request(seq_len_conds, *per_request_conds, size=size))
    return hyps


def _prefix_induct(lemma_id, phi, size, *per_request_conds, arity=0):
    hyps = batch_hyps(size, *per_request_conds)
    return core.induct(lemma_id, phi, arity=arity,
                         base_hyps=lambda *ps: hyps, base_by=lambda *ps: [PREFIX_ZERO],
                         step_hyps=lambda k, *ps: hyps,
                         step_by=lambda k, *ps: [prefix_at(k), *instances(hyps, k)])


_PROVED: dict = {}


def _per_size(lemma_id, size, build):
    """Each prefix lemma once per batch-size symbol (``bs`` for the tree, ``num_seqs`` for kv)."""
    key = (lemma_id, size.sexpr())
    if key not in _PROVED:
        _PROVED[key] = build()
    return _PROVED[key]


def prefix_bound_phi(v, size=bs):
    return z3.Implies(v <= size, z3.And(0 <= P(v), P(v) <= v * C))


def prefix_bound(size=bs):
    """VM-PREFIX-BOUND: ``forall v >= 0. v <= size => 0 <= P(v) <= v*C``."""
    return _per_size("VM-PREFIX-BOUND", size, lambda: _prefix_induct(
        "VM-PREFIX-BOUND", lambda v: prefix_bound_phi(v, size), size))


def prefix_monotone(size=bs):
    """``forall v, a. 0 <= a <= v <= size => P(a) <= P(v)`` (every seq_len >= 0)."""
    def phi(v, a):
        return z3.Implies(z3.And(0 <= a, a <= v, v <= size), P(a) <= P(v))
    return _per_size("L-PREFIX-MONOTONE", size, lambda: _prefix_induct("L-PREFIX-MONOTONE", phi, size, arity=1))


def prefix_room(size=bs):
    """``forall v >= 0. v <= size => P(v) + v*D <= v*C`` when every request has room for
    its D draft tokens (``seq_len[b] + D <= C``)."""
    def phi(v):
        return z3.Implies(v <= size, P(v) + v * D <= v * C)
    return _per_size("L-PREFIX-ROOM", size, lambda: _prefix_induct("L-PREFIX-ROOM", phi, size, draft_room_conds))


def prefix_at_context(size=bs):
    """``forall v >= 0. v <= size => P(v) = v*C`` when every ``seq_len = C``."""
    def phi(v):
        return z3.Implies(v <= size, P(v) == v * C)
    return _per_size("L-PREFIX-AT-CONTEXT", size,
                     lambda: _prefix_induct("L-PREFIX-AT-CONTEXT", phi, size, at_context_conds))


TOPK_POSITIVE = {"topk_positive": K >= 1}


@cache
def positions_within_request():
    """``forall t >= 0, r. t <= K /\\ r >= 0 => Q(r*K + t) = Q(r*K) + t*seq_len(r)``:
    each of request r's K branches adds ``seq_len(r)`` to the positions prefix."""
    def phi(tt, r):
        return z3.Implies(z3.And(tt <= K, r >= 0), Q(r * K + tt) == Q(r * K) + tt * seq_len(r))
    return core.induct("L-POSITIONS-WITHIN-REQUEST", phi, arity=1, step_hyps=lambda k, r: TOPK_POSITIVE,
                         step_by=lambda k, r: [positions_at(r * K + k), core.instantiate(div_of_row(), r, K, k)])


@cache
def positions_prefix():
    """``forall v >= 0. Q(v*K) = K*P(v)``."""
    return core.induct(
        "L-POSITIONS-PREFIX", lambda v: Q(v * K) == K * P(v),
        base_by=lambda: [PREFIX_ZERO, POSITIONS_ZERO],
        step_hyps=lambda k: TOPK_POSITIVE,
        step_by=lambda k: [prefix_at(k), core.instantiate(positions_within_request(), K, k),
                           core.instantiate(succ_times(), k, K)])
