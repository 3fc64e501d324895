"""The symbolic batch the theorems quantify over, and its hypotheses.

Every parameter is an unbounded Z3 integer; ``seq_len`` is an uninterpreted
function of the request index and ``P`` its prefix sum, tied together only by the
recurrence ``P(0) = 0, P(i+1) = P(i) + seq_len(i)`` (so no batch size is ever
fixed).  Hypotheses come from :mod:`specbound.spec.conditions`, so a theorem's
preconditions are literally the checks the reference performs at run time.

Labels: a parameter condition is tracked under its spec name
(``draft_tokens_fit_scores``); an instance of a per-request schema under
``name@index`` (``seq_len_le_context@b``).
"""

from __future__ import annotations

import z3

from specbound import spec

IntSort = z3.IntSort()

# Parameters
bs, max_bs = z3.Ints("bs max_bs")
n, K, D, C = z3.Ints("n K D C")
page = z3.Int("page_size")
num_seqs = z3.Int("num_seqs")
width = z3.Int("width")  # a kv_indices row width handed in by the caller

# Indices
b, t, j, c, e = z3.Ints("b t j c e")
iters = z3.Int("iters")

# Per-request data
seq_len = z3.Function("seq_len", IntSort, IntSort)
P = z3.Function("P", IntSort, IntSort)  # P(b) = sum_{i<b} seq_len(i)
Q = z3.Function("Q", IntSort, IntSort)  # Q(z) = sum_{z'<z} positions(z'), positions(z) = seq_len(z div K)


def labelled(conditions, at: str | None = None) -> dict:
    """Spec conditions as tracked hypotheses."""
    return {(c.name if at is None else f"{c.name}@{at}"): c.holds for c in conditions}


def in_batch(i, size=None):
    size = bs if size is None else size
    return z3.And(0 <= i, i < size)


def per_request(conditions_at, i, at: str, size=None) -> dict:
    """Schema instance: the conditions of request ``i``, guarded by ``0 <= i < size``
    (true for every index, so any instance may be assumed)."""
    guard = in_batch(i, size)
    return {f"{c.name}@{at}": z3.Implies(guard, c.holds) for c in conditions_at(i)}


def prefix_definition(i, at: str) -> dict:
    """``P(0) = 0`` and the recurrence at ``i`` (a definition: true for every ``i >= 0``)."""
    return {
        "prefix_zero": P(0) == 0,
        f"prefix_step@{at}": z3.Implies(i >= 0, P(i + 1) == P(i) + seq_len(i)),
    }


def positions_definition(z, at: str) -> dict:
    """``Q``: prefix sums of the per-branch positions (seq_len repeated K times)."""
    return {
        "positions_zero": Q(0) == 0,
        f"positions_step@{at}": z3.Implies(z >= 0, Q(z + 1) == Q(z) + seq_len(z / K)),
    }


def seq_len_conds(i):
    return spec.seq_len_ok(seq_len(i), C, name="seq_len[b]")


def draft_room_conds(i):
    return spec.draft_room_ok(seq_len(i), D, C, name="seq_len[b]")


def tree_params(bitpack: bool = False) -> dict:
    hyps = labelled(spec.tree_shape_ok(K, D, n))
    hyps.update(labelled(spec.context_ok(C)))
    hyps.update(labelled(spec.batch_size_ok(bs)))
    if bitpack:
        hyps.update(labelled(spec.bitpack_ok(n)))
    return hyps


def kv_params(size=None) -> dict:
    size = num_seqs if size is None else size
    hyps = labelled(spec.kv_shape_ok(K, D, page))
    hyps.update(labelled(spec.context_ok(C)))
    hyps.update(labelled(spec.batch_size_ok(size, name="num_seqs")))
    return hyps
