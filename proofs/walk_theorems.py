"""Theorems about the guarded tree walk (VM-WALK-*), for ANY contents of
``selected_index`` and ``parent_list``: malformed trees included.

The walk of row ``t`` is modelled as a sequence of iterations ``i = 0, 1, ...``
with uninterpreted per-iteration data: ``sel(i)`` (the entry read), ``found(i)`` /
``fidx(i)`` (the result of searching the row for the parent token).  Nothing
constrains the data except the search contract (a found index lies in
``spec.parent_search_range``), so the theorems hold for every input.  ``alive(i)``
says iteration ``i`` runs; the transition comes from ``spec.walk_step``.
The start and the transition are hypotheses of both theorems (the transition and the
search contract as formulas quantified over ``i``, instantiated by the core); both theorems
are inductions over ``i``: unbounded walk length, no unrolling.
"""

from __future__ import annotations

import z3

from specbound import spec
from specbound.spec import TreeMaskMode

from . import core
from .model import D, K, P, b, in_batch, instances, n, per_request, seq_len, seq_len_conds, t, tree_params
from .theorem import SEARCH_INDICES, SPEC, Mutant, Theorem

FAMILY = "tree walk"
BoolSort, IntSort = z3.BoolSort(), z3.IntSort()

cur = z3.Function("walk_cur", IntSort, IntSort)
steps = z3.Function("walk_steps", IntSort, IntSort)
sel = z3.Function("walk_sel", IntSort, IntSort)
fidx = z3.Function("walk_found_index", IntSort, IntSort)
found = z3.Function("walk_found", IntSort, BoolSort)
alive = z3.Function("walk_alive", IntSort, BoolSort)
k, v = z3.Ints("k v")
_i = z3.Int("i")


def _row_hyps():
    hyps = {**tree_params(), "request_in_batch[b]": in_batch(b), "walking_row": z3.And(1 <= t, t < n)}
    hyps.update(per_request(seq_len_conds))
    return hyps


def _start():
    return {"walk_start": z3.And(alive(0), cur(0) == t - 1, steps(0) == 0)}


def _transition(d):
    """Iteration ``i + 1`` from iteration ``i`` (spec.walk_step), and what the parent search
    returns, for every ``i``."""
    col, go, nxt, nsteps = d.walk_step(cur(_i), steps(_i), sel(_i), found(_i), fidx(_i), K, D)
    lo, hi = d.parent_search_range(n)
    # Iterations are numbered from 0: the transition says nothing of negative ones (unguarded,
    # it asserted a walk alive at every negative iteration with steps(i) = i, which no finite
    # walk is, so no witness of the hypotheses could be closed).
    return {
        "walk_transition": z3.ForAll([_i], z3.Implies(_i >= 0, z3.And(
            alive(_i + 1) == z3.And(alive(_i), go),
            z3.Implies(alive(_i + 1), z3.And(cur(_i + 1) == nxt, steps(_i + 1) == nsteps))))),
        "search_contract": z3.ForAll([_i], z3.Implies(found(_i), z3.And(lo <= fidx(_i), fidx(_i) < hi))),
    }


def _walk_hyps(d):
    return {**_row_hyps(), **_start(), **_transition(d)}


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


def _confined_claim(d):
    return z3.ForAll([v], z3.Implies(v >= 0, z3.And(_confined_phi(d, v), _search_in_row(d))))


def _prove_confined():
    invariant = _prove("VM-WALK-CONFINED/invariant", _confined_phi)
    search = core.check("VM-WALK-CONFINED/search", _search_in_row(SPEC), hyps=tree_params())
    w = z3.FreshInt("w")
    at_w = core.check("VM-WALK-CONFINED", z3.Implies(w >= 0, z3.And(_confined_phi(SPEC, w), _search_in_row(SPEC))),
                        hyps=_walk_hyps(SPEC), by=[core.instantiate(invariant, w), search])
    return core.generalise(at_w, w)


def _bounded_phi(d, i):
    return z3.Implies(alive(i), z3.And(steps(i) == i, i < d.walk_max_steps(D)))


def _prove(name, phi):
    hyps = _walk_hyps(SPEC)
    return core.induct(name, lambda i: phi(SPEC, i), base_hyps=lambda: hyps, base_by=lambda: instances(hyps, b),
                         step_hyps=lambda kk: hyps, step_by=lambda kk: instances(hyps, kk) + instances(hyps, b))


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
        hyps=_walk_hyps, claim=_confined_claim, counter_at=(k + 1,), search_indices=SEARCH_INDICES,
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
        hyps=_walk_hyps, claim=lambda d: z3.ForAll([v], z3.Implies(v >= 0, _bounded_phi(d, v))),
        counter_at=(k + 1,), search_indices=SEARCH_INDICES, report=_report,
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
