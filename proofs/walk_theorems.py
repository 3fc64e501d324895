"""Theorems about the guarded tree walk (VM-WALK-*), for ANY contents of
``selected_index`` and ``parent_list``: malformed trees included.

The walk of row ``t`` is modelled as a sequence of iterations ``i = 0, 1, ...``
with uninterpreted per-iteration data: ``sel(i)`` (the entry read), ``found(i)`` /
``fidx(i)`` (the result of searching the row for the parent token).  Nothing
constrains the data except the search contract (a found index lies in
``spec.parent_search_range``), so the theorems hold for every input.  ``alive(i)``
says iteration ``i`` runs; the transition comes from ``spec.walk_step``.
Both theorems are inductions over ``i``: unbounded walk length, no unrolling.
"""

from __future__ import annotations

import z3

from specbound import spec
from specbound.spec import TreeMaskMode

from . import kernel
from .model import (
    D, K, P, b, in_batch, n, per_request, prefix_definition, seq_len, seq_len_conds, t,
    tree_params,
)
from .theorem import Mutant, SPEC, Theorem

FAMILY = "tree walk"
BoolSort, IntSort = z3.BoolSort(), z3.IntSort()

cur = z3.Function("walk_cur", IntSort, IntSort)
steps = z3.Function("walk_steps", IntSort, IntSort)
sel = z3.Function("walk_sel", IntSort, IntSort)
fidx = z3.Function("walk_found_index", IntSort, IntSort)
found = z3.Function("walk_found", IntSort, BoolSort)
alive = z3.Function("walk_alive", IntSort, BoolSort)
k = z3.Int("k")


def _row_hyps():
    hyps = {**tree_params(), "request_in_batch@b": in_batch(b), "walking_row": z3.And(1 <= t, t < n)}
    hyps.update(per_request(seq_len_conds, b, "b"))
    hyps.update(prefix_definition(b, "b"))
    return hyps


def _start():
    return {"walk_start": z3.And(alive(0), cur(0) == t - 1, steps(0) == 0)}


def _transition(d, i, at):
    col, go, nxt, nsteps = d.walk_step(cur(i), steps(i), sel(i), found(i), fidx(i), K, D)
    lo, hi = d.parent_search_range(n)
    return {
        f"walk_transition@{at}": z3.And(
            alive(i + 1) == z3.And(alive(i), go),
            z3.Implies(alive(i + 1), z3.And(cur(i + 1) == nxt, steps(i + 1) == nsteps))),
        f"search_contract@{at}": z3.Implies(found(i), z3.And(lo <= fidx(i), fidx(i) < hi)),
    }


def _step_hyps(d, phi):
    return {**_row_hyps(), **_transition(d, k, "k"), "induction_index_nonneg": k >= 0,
            "induction_hypothesis": phi(d, k)}


def _confined(d, i):
    """Iteration ``i`` stays at an in-row node and every access it makes is inside row b / row t."""
    c = cur(i)
    col = d.walk_step(c, steps(i), sel(i), found(i), fidx(i), K, D)[0]
    s, p = seq_len(b), P(b)
    out = [0 <= c, c < d.selected_index_width(n), steps(i) == i]
    for mode in (TreeMaskMode.QLEN_ONLY, TreeMaskMode.FULL_MASK):
        start = d.mask_row_start(mode, b, t, n, s, p)
        cell = d.mask_tree_cell(mode, b, t, col, n, s, p)
        out += [start <= cell, cell < start + d.mask_row_width(mode, n, s)]
    bp = TreeMaskMode.QLEN_ONLY_BITPACKING
    out.append(z3.Implies(n <= spec.BITPACK_MAX_DRAFT_TOKENS,
                          z3.And(0 <= d.mask_bit(bp, col), d.mask_bit(bp, col) < d.bitpack_item_bits(n))))
    # the read of selected_index row b at the walk's own entry
    read = d.selected_index_cell(b, c, n)
    out += [d.selected_index_cell(b, 0, n) <= read, read < d.selected_index_cell(b + 1, 0, n)]
    # the parent_list read, made only for a LOOKUP slot
    slot = d.parent_slot(sel(i), K)
    pl = d.parent_list_cell(b, slot, K, D)
    out.append(z3.Implies(d.parent_slot_kind(sel(i), K, D) == spec.SLOT_LOOKUP,
                          z3.And(d.parent_list_cell(b, 0, K, D) <= pl,
                                 pl < d.parent_list_cell(b + 1, 0, K, D))))
    return z3.And(*out)


def _confined_phi(d, i):
    return z3.Implies(alive(i), _confined(d, i))


def _search_in_row(d):
    """The parent search reads entries [lo, hi) of row b: inside the row's n - 1 entries."""
    lo, hi = d.parent_search_range(n)
    return z3.And(0 <= lo, hi <= d.selected_index_width(n))


def _prove_confined():
    invariant = _prove("VM-WALK-CONFINED/invariant", _confined_phi)
    search = kernel.check("VM-WALK-CONFINED/search", _search_in_row(SPEC), hyps=tree_params())
    return kernel.check("VM-WALK-CONFINED", z3.And(_confined_phi(SPEC, k + 1), _search_in_row(SPEC)),
                        hyps={"induction_index_nonneg": k >= 0},
                        by=[kernel.instantiate(invariant, k + 1), search])


def _bounded_phi(d, i):
    return z3.Implies(alive(i), z3.And(steps(i) == i, i < d.walk_max_steps(D)))


def _prove(name, phi):
    return kernel.induct(
        name, lambda i: phi(SPEC, i),
        base_hyps=lambda: {**_row_hyps(), **_start()},
        step_hyps=lambda kk: {**_row_hyps(), **_transition(SPEC, kk, "k")})


def _report():
    return {"n": n, "K": K, "D": D, "t": t, "k": k, "cur[k]": cur(k), "sel[k]": sel(k),
            "found_index[k]": fidx(k), "found[k]": found(k), "steps[k]": steps(k),
            "cur[k+1]": cur(k + 1), "sel[k+1]": sel(k + 1)}


def _walk_step_unbounded(c, st, sel_value, fnd, idx, topk, depth):
    kind = spec.parent_slot_kind(sel_value, topk, depth)
    return c + 1, spec.all_of(kind == spec.SLOT_LOOKUP, fnd), idx, st + 1


def _slot_kind_unguarded(sel_value, topk, depth):
    slot = spec.parent_slot(sel_value, topk)
    return spec.ite(sel_value < 0, spec.SLOT_INVALID, spec.ite(slot == 0, spec.SLOT_ROOT, spec.SLOT_LOOKUP))


def vm_walk_confined() -> Theorem:
    return Theorem(
        id="VM-WALK-CONFINED", family=FAMILY,
        statement=("for ANY contents of selected_index and parent_list, every iteration of the bounded "
                   "walk of row (b, t) writes only inside mask row (b, t) and reads only inside row b of "
                   "selected_index and parent_list (induction over the iterations)"),
        hyps=lambda d: _step_hyps(d, _confined_phi),
        claim=lambda d: z3.And(_confined_phi(d, k + 1), _search_in_row(d)),
        report=_report,
        prove=_prove_confined,
        mutants=(
            Mutant("MUT-SEARCH-PAST-ROW",
                   "parent search scans n entries of the (n-1)-entry row (sglang CUDA kernel)",
                   overrides={"parent_search_range": lambda nn: (0, nn)}),
            Mutant("MUT-UNGUARDED-SLOT", "parent_list read at any slot >= 1, not guarded by its width",
                   overrides={"parent_slot_kind": _slot_kind_unguarded}),
        ),
    )


def vm_walk_bounded() -> Theorem:
    return Theorem(
        id="VM-WALK-BOUNDED", family=FAMILY,
        statement=("for ANY contents, the walk runs at most D iterations (iteration i runs only if i < D), "
                   "so a cycle cannot hang it and positions <= seq_len + D"),
        hyps=lambda d: _step_hyps(d, _bounded_phi),
        claim=lambda d: _bounded_phi(d, k + 1),
        report=_report,
        prove=lambda: _prove("VM-WALK-BOUNDED", _bounded_phi),
        mutants=(
            Mutant("MUT-UNBOUNDED-WALK",
                   "root-ward walk not bounded by D (sglang CUDA while(true)): a self-loop runs forever",
                   overrides={"walk_step": _walk_step_unbounded},
                   # ask for a genuine cycle: the parent found is the node itself
                   shape=lambda d: [fidx(k) == cur(k), found(k)]),
        ),
    )


THEOREMS = (vm_walk_confined, vm_walk_bounded)
