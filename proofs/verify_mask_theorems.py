"""Theorems about the verify tree mask (VM-*): every write inside the buffer.

Each theorem reads its formulas through ``d`` (the spec, or a mutant's view of
it); nothing here restates a size or an offset.
"""

from __future__ import annotations

import z3

from specbound import spec
from specbound.spec import TreeMaskMode

from . import core
from . import lemmas
from .model import (
    C, P, at_context_conds, b, bs, c, in_batch, j, labelled, max_bs, n, per_request, prefix_at,
    seq_len, seq_len_conds, t, tree_params,
)
from .theorem import SEARCH_INDICES, Mutant, Theorem

FULL, QLEN, BITPACK = TreeMaskMode.FULL_MASK, TreeMaskMode.QLEN_ONLY, TreeMaskMode.QLEN_ONLY_BITPACKING
FAMILY = "verify mask"

b2, t2 = z3.Ints("b2 t2")


def _report(*extra, without=()):
    """Values shown in witnesses and counterexamples (those the theorem does not constrain
    are left out: the minimiser would only drive them to arbitrary small numbers)."""
    base = {"bs": bs, "max_bs": max_bs, "n": n, "C": C, "b": b, "t": t, "j": j,
            "seq_len[b]": seq_len(b), "P[b]": P(b)}
    base.update(dict(extra))
    for key in without:
        base.pop(key)
    return lambda: base


def _request(*indices):
    """Requests ``indices`` are in the batch, and every request's seq_len is in [0, C]."""
    hyps = {f"request_in_batch[{i}]": in_batch(i) for i in indices}
    hyps.update(per_request(seq_len_conds))
    return hyps


def _cell_ranges():
    return {"row_in_tree": z3.And(0 <= t, t < n), "node_in_tree": z3.And(0 <= j, j < n)}


def _fits(d):
    hyps = labelled(spec.max_bs_ok(max_bs))
    hyps["fits"] = d.fits(bs, max_bs)
    return hyps


def _writes_below(d, mode, limit):
    """Every kernel write, and (FULL_MASK) every prefix-fill write, of (b, t) is in [0, limit)."""
    s, p = seq_len(b), P(b)
    cell = d.mask_tree_cell(mode, b, t, j, n, s, p)
    claims = [0 <= cell, cell < limit]
    if mode is FULL:
        fill = d.mask_prefix_cell(mode, b, t, c, n, s, p)
        claims.append(z3.Implies(z3.And(0 <= c, c < d.mask_prefix_columns(mode, s)),
                                 z3.And(0 <= fill, fill < limit)))
    return z3.And(*claims)


def _always_fits(bs_, max_bs_):
    return True


def _fits_off_by_one(bs_, max_bs_):
    return bs_ <= max_bs_ + 1


def vm_prefix_bound() -> Theorem:
    k, v = z3.Ints("k v")
    return Theorem(
        id="VM-PREFIX-BOUND", family=FAMILY,
        statement="0 <= P[v] <= v*C for every 0 <= v <= bs (induction over v)",
        hyps=lambda d: lemmas.batch_hyps(bs),
        claim=lambda d: z3.ForAll([v], z3.Implies(v >= 0, lemmas.prefix_bound_phi(v))),
        report=lambda: {"k": k, "bs": bs, "C": C, "seq_len[k]": seq_len(k), "P[k]": P(k),
                        "P[k+1]": P(k + 1)},
        prove=lemmas.prefix_bound, counter_at=(k + 1,), search_indices=SEARCH_INDICES,
        mutants=(Mutant("MUT-NO-CONTEXT-BOUND",
                        "seq_len not bounded by max_context_len (a request past its context)",
                        drop=("seq_len_le_context",)),
                 Mutant("MUT-NEGATIVE-SEQ-LEN", "seq_len may be negative", drop=("seq_len_nonneg",))),
    )


def vm_qlen_in_bounds() -> Theorem:
    return Theorem(
        id="VM-QLEN-IN-BOUNDS", family=FAMILY,
        statement="bs <= max_bs => every QLEN_ONLY write < tree_mask_numel(QLEN_ONLY, max_bs)",
        hyps=lambda d: {**tree_params(), **_fits(d), **_request(b), **_cell_ranges()}, at=(b,),
        claim=lambda d: _writes_below(d, QLEN, d.tree_mask_numel(QLEN, max_bs, n, C)),
        report=_report(),
        lemmas=lambda: [prefix_at(b), core.instantiate(lemmas.mul_le_mono(), b + 1, max_bs, n * n),
                        core.instantiate(lemmas.mul_le_mono(), t + 1, n, n)],
        mutants=(Mutant("MUT-FITS-OFF-BY-ONE", "fits admits bs = max_bs + 1",
                        overrides={"fits": _fits_off_by_one}),),
    )


def vm_full_in_bounds() -> Theorem:
    return Theorem(
        id="VM-FULL-IN-BOUNDS", family=FAMILY,
        statement=("bs <= max_bs and every seq_len[b] <= C => every FULL_MASK write (kernel tree "
                   "columns and the caller's prefix fill) < tree_mask_numel(FULL_MASK, max_bs)"),
        hyps=lambda d: {**tree_params(), **_fits(d), **_request(b), **_cell_ranges()}, at=(b,),
        claim=lambda d: _writes_below(d, FULL, d.tree_mask_numel(FULL, max_bs, n, C)),
        report=_report(("c", c)),
        lemmas=lambda: [prefix_at(b), core.instantiate(lemmas.prefix_bound(), b),
                        core.instantiate(lemmas.mul_le_mono(), P(b), b * C, n),
                        core.instantiate(lemmas.mul_le_mono(), b + 1, max_bs, n * (C + n)),
                        core.instantiate(lemmas.mul_le_mono(), t + 1, n, seq_len(b) + n),
                        core.instantiate(lemmas.mul_le_mono(), seq_len(b) + n, C + n, n)],
        mutants=(
            Mutant("MUT-33127-FULL-ALWAYS-FITS",
                   "fits() skipped the capacity check for FULL_MASK (sglang #33119/#33127)",
                   overrides={"fits": _always_fits}),
            Mutant("MUT-29450-MISSING-DRAFT-TERM",
                   "FULL_MASK per-request size n*C, without the +n draft columns (sglang #29450)",
                   overrides={"tree_mask_numel": lambda mode, mb, nn, cc: mb * nn * cc}),
            Mutant("MUT-FITS-OFF-BY-ONE", "fits admits bs = max_bs + 1",
                   overrides={"fits": _fits_off_by_one}),
        ),
    )


def vm_bitpack_in_bounds() -> Theorem:
    def claim(d):
        item = d.mask_tree_cell(BITPACK, b, t, j, n, seq_len(b), P(b))
        bit = d.mask_bit(BITPACK, j)
        return z3.And(0 <= item, item < d.tree_mask_numel(BITPACK, max_bs, n, C),
                      0 <= bit, bit < d.bitpack_item_bits(n))
    return Theorem(
        id="VM-BITPACK-IN-BOUNDS", family=FAMILY,
        statement="n <= 32 and bs <= max_bs => every item < max_bs*n and every bit < the item width",
        hyps=lambda d: {**tree_params(bitpack=True), **_fits(d), **_request(b), **_cell_ranges()}, at=(b,),
        claim=claim,
        report=_report(),
        lemmas=lambda: [prefix_at(b), core.instantiate(lemmas.mul_le_mono(), b + 1, max_bs, n)],
        mutants=(Mutant("MUT-BITPACK-ONE-BYTE", "items always 8 bits wide",
                        overrides={"bitpack_item_bits": lambda nn: 8}),),
    )


def vm_fits_tight() -> Theorem:
    last = bs - 1

    def hyps(d):
        h = {**tree_params(), **labelled(spec.max_bs_ok(max_bs)), "batch_nonempty": bs >= 1}
        h.update(per_request(seq_len_conds, at_context_conds))
        return h

    def claim(d):
        out = []
        for mode in (QLEN, FULL):
            highest = d.mask_tree_cell(mode, last, n - 1, n - 1, n, seq_len(last), P(last))
            out.append(d.fits(bs, max_bs) == (highest < d.tree_mask_numel(mode, max_bs, n, C)))
        return z3.And(*out)
    return Theorem(
        id="VM-FITS-TIGHT", family=FAMILY,
        statement=("for QLEN_ONLY and FULL_MASK and a worst-case batch (every seq_len = C): "
                   "fits(bs) holds exactly when the batch's highest write is inside the buffer; "
                   "bs = max_bs + 1 writes past it"),
        hyps=hyps, claim=claim, at=(last,),
        report=lambda: {"bs": bs, "max_bs": max_bs, "n": n, "C": C},
        lemmas=lambda: [core.instantiate(lemmas.prefix_at_context(), last),
                        core.instantiate(lemmas.mul_le_mono(), bs, max_bs, n * n),
                        core.instantiate(lemmas.mul_le_mono(), max_bs + 1, bs, n * n),
                        core.instantiate(lemmas.mul_le_mono(), bs, max_bs, n * (C + n)),
                        core.instantiate(lemmas.mul_le_mono(), max_bs + 1, bs, n * (C + n))],
        mutants=(
            Mutant("MUT-33127-FULL-ALWAYS-FITS", "fits() always True (FULL_MASK before #33127)",
                   overrides={"fits": _always_fits}),
            Mutant("MUT-FITS-STRICT", "fits uses bs < max_bs: refuses a batch that fits",
                   overrides={"fits": lambda bs_, mb: bs_ < mb}),
        ),
    )


def _row(d, mode, bi, ti, pi):
    start = d.mask_row_start(mode, bi, ti, n, seq_len(bi), pi)
    return start, start + d.mask_row_width(mode, n, seq_len(bi))


def vm_rows_disjoint() -> Theorem:
    def hyps(d):
        h = {**tree_params(), **_request(b, b2)}
        h["rows_in_tree"] = z3.And(0 <= t, t < n, 0 <= t2, t2 < n)
        h["rows_ordered"] = z3.Or(b < b2, z3.And(b == b2, t < t2))
        return h

    def claim(d):
        out = []
        for mode in spec.ALL_MODES:
            start1, end1 = _row(d, mode, b, t, P(b))
            start2, _ = _row(d, mode, b2, t2, P(b2))
            last_start, last_end = _row(d, mode, b, n - 1, P(b))
            out += [
                d.mask_request_base(mode, 0, n, 0) == 0,                 # first row starts at 0
                end1 > start1,                                            # rows are non-empty
                end1 <= start2,                                           # ordered rows are disjoint
                z3.Implies(t + 1 < n, _row(d, mode, b, t + 1, P(b))[0] == end1),  # no gap inside a request
                last_end == d.mask_request_base(mode, b + 1, n, P(b + 1)),        # nor between requests
                d.mask_request_base(mode, bs, n, P(bs))
                == d.mask_batch_numel(mode, bs, n, P(bs)),                # the last ends at the exact size
            ]
        return z3.And(*out)
    return Theorem(
        id="VM-ROWS-DISJOINT", family=FAMILY,
        statement=("in every layout, rows (b, t) are non-empty, ordered rows are disjoint, and they tile "
                   "[0, exact size) with no gap: no two writers share a cell"),
        hyps=hyps, claim=claim, at=(b, b2),
        report=_report(("b2", b2), ("t2", t2), ("seq_len[b2]", seq_len(b2)), ("P[b2]", P(b2)),
                       without=("max_bs", "j")),
        lemmas=lambda: [prefix_at(b), prefix_at(b2), core.instantiate(lemmas.prefix_bound(), b),
                        core.instantiate(lemmas.prefix_bound(), b2),
                        core.instantiate(lemmas.prefix_monotone(), b2, b + 1),
                        core.instantiate(lemmas.mul_le_mono(), P(b + 1), P(b2), n),
                        core.instantiate(lemmas.mul_le_mono(), b + 1, b2, n * n),
                        core.instantiate(lemmas.mul_le_mono(), b + 1, b2, n),
                        core.instantiate(lemmas.mul_le_mono(), t + 1, t2, seq_len(b) + n),
                        core.instantiate(lemmas.mul_le_mono(), t + 1, t2, n),
                        core.instantiate(lemmas.mul_le_mono(), t + 1, n, seq_len(b) + n),
                        core.instantiate(lemmas.mul_le_mono(), t + 1, n, n)],
        mutants=(
            Mutant("MUT-ROW-STRIDE-NO-DRAFT",
                   "FULL_MASK row stride seq_len[b] instead of seq_len[b] + n: rows overlap",
                   overrides={"mask_row_start": lambda mode, bi, ti, nn, s, p:
                              spec.mask_request_base(mode, bi, nn, p) + s * ti
                              if mode is FULL else spec.mask_row_start(mode, bi, ti, nn, s, p)}),
            Mutant("MUT-FULL-BASE-NO-PREFIX",
                   "FULL_MASK request base b*n*n, ignoring the prefix P[b]: requests overlap",
                   overrides={"mask_request_base": lambda mode, bi, nn, p:
                              bi * nn * nn if mode is FULL else spec.mask_request_base(mode, bi, nn, p)}),
        ),
    )


def vm_exact_extent() -> Theorem:
    last = bs - 1

    def hyps(d):
        return {**tree_params(), "batch_nonempty": bs >= 1, **_request(last)}

    def claim(d):
        out = []
        for mode in spec.ALL_MODES:
            columns = d.mask_tree_columns(mode, n)
            highest = d.mask_tree_cell(mode, last, n - 1, columns - 1, n, seq_len(last), P(last))
            out.append(highest + 1 == d.mask_batch_numel(mode, bs, n, P(bs)))
        out.append(d.mask_batch_numel(FULL, bs, 1, P(bs)) == d.trivial_verify_numel(bs, P(bs)))
        return z3.And(*out)
    return Theorem(
        id="VM-EXACT-EXTENT", family=FAMILY,
        statement=("highest written cell + 1 = the exact per-batch size in every layout; "
                   "trivial verify (n = 1) is S + bs"),
        hyps=hyps, claim=claim, at=(last,), lemmas=lambda: [prefix_at(last)],
        report=lambda: {"bs": bs, "n": n, "seq_len[bs-1]": seq_len(last), "P[bs-1]": P(last),
                        "S": P(bs)},
        mutants=(
            Mutant("MUT-29450-MISSING-DRAFT-TERM", "FULL_MASK batch size S*n without bs*n*n",
                   overrides={"mask_batch_numel": lambda mode, bb, nn, ss:
                              ss * nn if mode is FULL else spec.mask_batch_numel(mode, bb, nn, ss)}),
            Mutant("MUT-TRIVIAL-NO-BS", "trivial verify allocates S cells, no root column",
                   overrides={"trivial_verify_numel": lambda bb, ss: ss}),
        ),
    )


def vm_fallback_covers() -> Theorem:
    def claim(d):
        return z3.And(*[_writes_below(d, mode, d.fallback_numel(mode, bs, n, P(bs)))
                        for mode in spec.ALL_MODES])
    return Theorem(
        id="VM-FALLBACK-COVERS", family=FAMILY,
        statement="for any bs (no max_bs), the per-batch fallback allocation covers every write",
        hyps=lambda d: {**tree_params(), **_request(b), **_cell_ranges()}, at=(b,),
        claim=claim,
        report=_report(("S", P(bs)), ("c", c), without=("max_bs",)),
        lemmas=lambda: [prefix_at(b), core.instantiate(lemmas.prefix_bound(), b),
                        core.instantiate(lemmas.prefix_monotone(), bs, b + 1),
                        core.instantiate(lemmas.mul_le_mono(), P(b + 1), P(bs), n),
                        core.instantiate(lemmas.mul_le_mono(), b + 1, bs, n * n),
                        core.instantiate(lemmas.mul_le_mono(), b + 1, bs, n),
                        core.instantiate(lemmas.mul_le_mono(), t + 1, n, seq_len(b) + n),
                        core.instantiate(lemmas.mul_le_mono(), t + 1, n, n)],
        mutants=(Mutant("MUT-FALLBACK-COMPACT-SIZE",
                        "FULL_MASK fallback sized like QLEN_ONLY (bs*n*n)",
                        overrides={"fallback_numel": lambda mode, bb, nn, ss: bb * nn * nn}),),
    )


def vm_int32_safe() -> Theorem:
    def hyps(d):
        h = {**tree_params(), **_request(b), **_cell_ranges()}
        h.update(labelled(spec.int32_alloc_ok(d.mask_batch_numel(FULL, bs, n, P(bs)),
                                              name="mask_batch_numel")))
        return h

    def claim(d):
        s, p = seq_len(b), P(b)
        # Every partial sum, in the order the kernel adds them (spec.mask_tree_cell's shape).
        terms = [n * p, d.mask_request_base(FULL, b, n, p),
                 d.mask_row_width(FULL, n, s) * t, d.mask_row_start(FULL, b, t, n, s, p),
                 d.mask_tree_cell(FULL, b, t, j, n, s, p)]
        return z3.And(*[z3.And(0 <= x, x < spec.INT32_LIMIT) for x in terms])
    return Theorem(
        id="VM-INT32-SAFE", family=FAMILY,
        statement=("if the FULL_MASK allocation has < 2^31 cells, every offset the kernel computes "
                   "(each partial sum, in its order) stays in [0, 2^31)"),
        hyps=hyps, claim=claim, at=(b,),
        report=_report(("S", P(bs)), without=("max_bs",)),
        lemmas=lambda: [prefix_at(b), core.instantiate(lemmas.prefix_bound(), b),
                        core.instantiate(lemmas.prefix_monotone(), bs, b + 1),
                        core.instantiate(lemmas.mul_le_mono(), P(b + 1), P(bs), n),
                        core.instantiate(lemmas.mul_le_mono(), P(b), P(bs), n),
                        core.instantiate(lemmas.mul_le_mono(), b + 1, bs, n * n),
                        core.instantiate(lemmas.mul_le_mono(), t + 1, n, seq_len(b) + n),
                        core.instantiate(lemmas.mul_le_mono(), t, n, seq_len(b) + n)],
        mutants=(Mutant("MUT-INT32-OVERFLOW",
                        "int32 offsets with no bound on the allocation (>= 2^31 cells wraps)",
                        drop=("alloc_below_int32",)),),
    )


THEOREMS = (vm_prefix_bound, vm_qlen_in_bounds, vm_full_in_bounds, vm_bitpack_in_bounds,
            vm_fits_tight, vm_rows_disjoint, vm_exact_extent, vm_fallback_covers, vm_int32_safe)
