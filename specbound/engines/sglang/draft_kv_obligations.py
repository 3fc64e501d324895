"""Obligations of sglang's draft kv kernel: footprint, races, and the case
splits that keep the queries small; the model is :mod:`.sglang_draft_kv`."""

from __future__ import annotations

import z3

from specbound import spec
from specbound.proofs import core as proof_core
from specbound.proofs import lemmas as spec_lemmas
from specbound.proofs.model import D, K, P, num_seqs, page, seq_len
from specbound.proofs.terms import subterms

from specbound.proofs.symexec import lemmas as symexec_lemmas
from specbound.proofs.symexec.models import mul_mono
from .draft_kv_layout import SCOPED, blocks, block_of, indptr_stride, iters_of, r2t_width, spec_hyps, width
from specbound.proofs.symexec.values import LANES, SymDim, Unsupported, dim_term
from specbound.proofs.symexec.footprint import cover, sound
from specbound.proofs.symexec.obligations import Obligation
from specbound.proofs.symexec.obligations import instantiate
from specbound.proofs.symexec.theorems import obligations as generic

def _iteration(run, a):
    """The iteration constant ``k`` of the symbolic loop a store runs in (None outside one)."""
    for label, cond in a.path:
        if label.startswith("loop_iter@"):
            for c in run.result.local_consts:
                if str(c).startswith("iter@") and _mentions(cond, c):
                    return c
    return None


def _mentions(e, c):
    return any(x.get_id() == c.get_id() for x in subterms(e))


def _segment(it, b, t):
    return spec.kv_segment_start(P(b), b, t, K, it, seq_len(b))


def kv_cell(it, b, t, col):
    """The spec's cell of column ``col`` of branch (b, t) in row ``it - 1``."""
    return spec.kv_indices_cell(width, it, _segment(it, b, t) + col)


def kv_domain(it, b, t, col):
    return z3.And(1 <= it, it <= D, 0 <= b, b < num_seqs, 0 <= t, t < K, 0 <= col,
                  col < spec.kv_segment_len(seq_len(b), it))


def _store_indices(run, a):
    """What an active lane of a store denotes, from the program ids and its address:
    ``("kv_indices", (iters, b, t, col))`` or ``("kv_indptr", (iters, z))``."""
    pid0, pid1, pid2 = run.result.pid
    it = iters_of(run.spec, pid0)
    # (simplified to a sum of monomials: the row and segment terms cancel, leaving the lane term)
    if a.tensor.name == "kv_indices":
        col = z3.simplify(a.off.e - kv_cell(it, pid1, pid2, z3.IntVal(0)), som=True)
        return "kv_indices", (it, pid1, pid2, col)
    if a.tensor.name == "kv_indptr":
        return "kv_indptr", (it, z3.simplify(a.off.e - spec.kv_indices_cell(indptr_stride, it, z3.IntVal(0)), som=True))
    raise Unsupported(f"footprint map: a store to {a.tensor.name}, which the spec does not name", a.line)


def indptr_branch(z):
    """The branch (b, t) whose program writes kv_indptr entry ``z`` (1 <= z <= bs_d): the
    branch before it, except entry bs_d, which branch (0, 0) writes."""
    last = z == spec.draft_branches(num_seqs, K)
    return z3.If(last, z3.IntVal(0), z / K), z3.If(last, z3.IntVal(0), z % K)


def indptr_value(z, it):
    """``spec.kv_indptr_entry`` of entry ``z`` (positions prefix of the branches before it)."""
    zb, zt = z / K, z % K
    return spec.kv_indptr_entry(spec.kv_positions_prefix(P(zb), zt, K, seq_len(zb)), z, it)


def owner_block(sp, b, col, tile):
    """The token block that writes column ``col`` of request b's branch segment: the block of
    the column's ``tile``-slot tile for a prefix column, block 0 for the extension."""
    if sp.NUM_STEPS == 0:
        return z3.IntVal(0)
    return z3.If(col < seq_len(b), (col / tile) % blocks, z3.IntVal(0))


def _token(run, b, pos):
    r2t, pool_row = run.functions["req_to_token"][0], run.functions["pool_row"][0]
    return r2t(pool_row(b) * r2t_width + pos)


def kv_value(run, it, b, t, col):
    """The value the spec puts in column ``col``: the request's req_to_token entry (prefix
    column) or the one ``spec.kv_extension_read`` names (extension column)."""
    s = seq_len(b)
    return z3.If(col < s, _token(run, b, col),
                 _token(run, b, spec.kv_extension_read(s, t, col - s, K, D, page)))


def _tile(a):
    return a.shape[0] if a.shape else 1


def _program_lemmas(run, a):
    """Division facts at a store's own terms (token blocks): ``pid0 = (pid0 mod N) + N*(pid0
    div N)``, ``grid0 div N = blocks``, and the column ``(blk + k*blocks)*tile + lane`` of
    iteration k lies in tile ``blk + k*blocks``."""
    sp = run.spec
    if not sp.NUM_STEPS:
        return []
    n = z3.IntVal(sp.NUM_STEPS)
    pid0 = run.result.pid[0]
    out = [symexec_lemmas.at(symexec_lemmas.div_mod_range, pid0, n), symexec_lemmas.at(symexec_lemmas.div_unique, blocks, z3.IntVal(0), n),
           symexec_lemmas.at(symexec_lemmas.div_lt, pid0, n, blocks)]
    k = _iteration(run, a)
    if k is not None:
        tile = pid0 / n + k * blocks
        out += [symexec_lemmas.at(symexec_lemmas.div_unique, tile, LANES[0], z3.IntVal(_tile(a))), symexec_lemmas.at(symexec_lemmas.div_unique, k, pid0 / n, blocks)]
    return out


def _cell_lemmas(sp, fi, fc, tile):
    """Division facts at the program chosen for a spec cell (coverage): the tile of the
    column, the tile's block, and the step and block recovered from ``pid0``.  A store of
    symbolic length (the extension's ``arange(0, iter_upper)``) has no tiles: its tile facts
    are left out (they would only add divisions by the lane bound)."""
    tiled = not isinstance(tile, SymDim)
    out = [symexec_lemmas.at(symexec_lemmas.div_mod_range, fc, z3.IntVal(tile))] if tiled else []
    if sp.NUM_STEPS:
        n = z3.IntVal(sp.NUM_STEPS)
        t_ = fc / tile if tiled else None
        at = symexec_lemmas.at
        out += ([at(symexec_lemmas.div_mod_range, t_, blocks), at(symexec_lemmas.div_lt, t_ % blocks, blocks, z3.IntVal(1)),
                 at(symexec_lemmas.div_unique, t_ % blocks, fi - 1, n)] if tiled else []) + \
            [at(symexec_lemmas.div_unique, z3.IntVal(0), fi - 1, n), at(symexec_lemmas.div_unique, blocks, z3.IntVal(0), n)] + \
            ([at(symexec_lemmas.div_unique, t_ / blocks, t_ % blocks, blocks)] if tiled else [])
    return out


def footprint_obligations(run) -> list:
    """Soundness: every active lane writes a spec cell of its own branch (column inside the
    segment, row ``iters - 1``) with the spec's value; kv_indptr entries ``1..bs_d`` with the
    spec's entry.  Completeness: for every spec cell the program and lane chosen as functions
    of the cell run the store, active, at that address (entry 0 is the caller's zero)."""

    sp = run.spec
    out = []
    fi, fb, ft, fc, fz = z3.Ints("cell_iters cell_b cell_t cell_c cell_z")
    pid0, pid1, pid2 = run.result.pid
    bs_d = spec.draft_branches(num_seqs, K)
    n = z3.IntVal(max(sp.NUM_STEPS, 1))
    for i, a in enumerate(run.result.accesses):
        if a.kind != "store":
            continue
        kind, idx = _store_indices(run, a)
        if kind == "kv_indices":
            it, b, t, col = idx
            out.append(sound(run, a, i, "a cell of its own branch's segment in row iters - 1 (spec.kv_indices_cell "
                             "of spec.kv_segment_start), with the spec's value (req_to_token[row, col] for a "
                             "prefix column, [row, spec.kv_extension_read(...)] for an extension column)",
                             kv_domain(it, b, t, col), kv_cell(it, b, t, col), kv_value(run, it, b, t, col)))
            k = _iteration(run, a)
            tile = _tile(a)
            if k is not None:   # the prefix copy: tile c div T of the loop (block tile mod blocks), lane c mod T
                dom = z3.And(kv_domain(fi, fb, ft, fc), fc < seq_len(fb))
                block = z3.IntVal(0) if sp.NUM_STEPS == 0 else (fc / tile) % blocks
                bind = [(LANES[0], fc % tile), (k, fc / tile if sp.NUM_STEPS == 0 else (fc / tile) / blocks)]
                what = "prefix column"
            else:               # the extension (block 0): lane e = c - seq_len
                dom = z3.And(kv_domain(fi, fb, ft, fc), fc >= seq_len(fb))
                block = z3.IntVal(0)
                bind = [(LANES[0], fc - seq_len(fb))]
                what = "extension column"
            bind = [(pid0, (fi - 1) + (sp.NUM_STEPS or 0) * block), (pid1, fb), (pid2, ft)] + bind
            out.append(cover(run, a, i, f"(every {what} of every branch and row)", (fi, fb, ft, fc), dom, bind,
                             [(it, fi), (col, fc)], _cell_lemmas(sp, fi, fc, tile)))
        else:
            it, z = idx
            out.append(sound(run, a, i, "spec.kv_indices_cell(kv_indptr_stride, iters, z) for 1 <= z <= bs_d, with "
                             "value spec.kv_indptr_entry(kv_positions_prefix(P[z div K], z mod K, ...), z, iters)",
                             z3.And(1 <= it, it <= D, 1 <= z, z <= bs_d), spec.kv_indices_cell(indptr_stride, it, z),
                             indptr_value(z, it),
                             [symexec_lemmas.at(symexec_lemmas.div_unique, pid1, pid2, K), proof_core.instantiate(spec_lemmas.positions_prefix(), pid1 + 1)]))
            zb, zt = indptr_branch(fz)
            dom = z3.And(1 <= fi, fi <= D, 1 <= fz, fz <= bs_d)
            out.append(cover(run, a, i, "spec.kv_indices_cell(kv_indptr_stride, iters, z), 1 <= z <= bs_d "
                             "(entry 0 is the caller's zero)", (fi, fz), dom,
                             [(pid0, fi - 1), (pid1, zb), (pid2, zt)], [(it, fi), (z, fz)],
                             [symexec_lemmas.at(symexec_lemmas.div_mod_range, fz, K), symexec_lemmas.at(symexec_lemmas.div_lt, fz - 1, K, num_seqs),
                              symexec_lemmas.at(symexec_lemmas.div_unique, z3.IntVal(0), fi - 1, n)]))
    return out


def race_obligations(run) -> list:
    """Race freedom in two steps.  ``owner`` (per store): every active lane writes inside its
    own program's part of the buffer — its own branch's segment in its own step's row and,
    with token blocks, a prefix column of a tile its block owns (or block 0 for the
    extension and kv_indptr); kv_indptr entry z is written by the branch ``indptr_branch``
    assigns it.  ``injective`` (spec terms only): the spec's cell map is strictly increasing
    in (iters, b, t, col) and (iters, z), so two programs never denote the same cell."""

    sp = run.spec
    out = []
    pid0, pid1, pid2 = run.result.pid
    bs_d = spec.draft_branches(num_seqs, K)
    for i, a in enumerate(run.result.accesses):
        if a.kind != "store":
            continue
        kind, idx = _store_indices(run, a)
        if kind == "kv_indptr":
            it, z = idx
            zb, zt = indptr_branch(z)
            goal = z3.And(1 <= z, z <= bs_d, pid1 == zb, pid2 == zt, block_of(sp, pid0) == 0)
            lem = [symexec_lemmas.at(symexec_lemmas.div_unique, pid1, pid2, K)] + _program_lemmas(run, a)
        else:
            it, b, t, col = idx
            goal = z3.And(kv_domain(it, b, t, col), block_of(sp, pid0) == owner_block(sp, b, col, dim_term(_tile(a))))
            lem = _program_lemmas(run, a)
        out.append(Obligation(f"owner-{a.tensor.name}@{a.line}#{i}", "region", a.line,
                              "every active lane writes inside its own program's part of the buffer",
                              run.base_hyps(a.path, a.shape, a.mask), goal, list(run.lemmas) + lem))
    out += _injective(run)
    return out


def _injective(run) -> list:
    A = z3.Ints("itA bA tA cA")
    B = z3.Ints("itB bB tB cB")
    # spec terms only (the quantified per-request hypotheses only discharge the cited
    # lemmas' own), as the capacity lemma: none of the kernel's launch facts
    hyps = spec_hyps(run)
    hyps["indices_A"] = kv_domain(*A)
    hyps["indices_B"] = kv_domain(*B)
    (ia, ba, ta, ca), (ib, bb, tb, cb) = A, B
    contracts = [ax for ax in run.axioms if ax.name in ("batch_nonempty", "width_from_sizing", "indptr_row_width")]
    lem = ([run.capacity] if run.capacity is not None else []) + contracts
    cases = {
        "row": (ia < ib, [symexec_lemmas.at(symexec_lemmas.kv_segment_in_row, P(ba), P(num_seqs), ba, num_seqs, ta, ia, seq_len(ba), K, D,
                                width), mul_mono(ia, ib - 1, width),
                          proof_core.instantiate(spec_lemmas.prefix_monotone(num_seqs), num_seqs, ba + 1), mul_mono(P(ba + 1), P(num_seqs), K),
                          proof_core.instantiate(spec_lemmas.prefix_bound(num_seqs), bb),
                          symexec_lemmas.at(symexec_lemmas.kv_segment_start_nonneg, P(bb), bb, tb, K, ib, seq_len(bb))]),
        "request": (z3.And(ia == ib, ba < bb), [proof_core.instantiate(spec_lemmas.prefix_monotone(num_seqs), bb, ba + 1),
                                                 mul_mono(P(ba + 1), P(bb), K), mul_mono(ba + 1, bb, ia * K),
                                                 mul_mono(ta, K - 1, seq_len(ba) + ia),
                                                 mul_mono(z3.IntVal(0), tb, seq_len(bb) + ib)]),
        "branch": (z3.And(ia == ib, ba == bb, ta < tb), [mul_mono(ta + 1, tb, seq_len(ba) + ia)]),
        "column": (z3.And(ia == ib, ba == bb, ta == tb, ca < cb), []),
    }
    out = []
    for name, (case, extra) in cases.items():
        h = dict(hyps)
        h[f"first_difference_{name}"] = case
        out.append(Obligation(f"injective-kv_indices/{name}", "race", 0,
                              f"the spec's kv_indices cells are strictly increasing in (iters, b, t, col): indices "
                              f"that first differ in {name} map to increasing cells", h,
                              kv_cell(*A) < kv_cell(*B), lem + extra))
    zA, zB = z3.Ints("zA zB")
    bs_d = spec.draft_branches(num_seqs, K)
    h = dict(hyps)
    h.pop("indices_A")
    h.pop("indices_B")
    h["entries"] = z3.And(1 <= ia, ia <= D, 1 <= ib, ib <= D, 1 <= zA, zA <= bs_d, 1 <= zB, zB <= bs_d)
    h["lexicographic"] = z3.Or(ia < ib, z3.And(ia == ib, zA < zB))
    out.append(Obligation("injective-kv_indptr", "race", 0, "the spec's kv_indptr cells are strictly increasing in "
                          "(iters, z)", h, spec.kv_indices_cell(indptr_stride, ia, zA)
                          < spec.kv_indices_cell(indptr_stride, ib, zB), [mul_mono(ia, ib - 1, indptr_stride)] + contracts))
    return out


def split_by_program_cases(run, obs) -> list:
    """Each obligation once per case of the program-level conditions inside its goal (the
    ``zid == 0`` of the last kv_indptr entry): smaller queries; a case is dropped only when
    the core proves the preconditions exclude it."""
    from dataclasses import replace

    out = []
    for ob in obs:
        cases = run._scalar_cases(ob.goal, program_ids=True)
        for label, case in cases:
            if case is None:
                out.append(ob)
                continue
            hyps, lemmas = instantiate(ob.hyps, case, run.functions, ob.lemmas)
            try:   # a case this obligation's own hypotheses exclude is dropped, by proof
                proof_core.check(f"{ob.id}{label}/excluded", z3.Not(case), hyps=hyps, by=lemmas, rlimit=500_000)
                continue
            except (proof_core.Refuted, proof_core.Unknown):
                pass
            # the goal with the case's conditions decided (equivalent under the case hypothesis)
            decided = [(c, z3.BoolVal(True)) for c in _conjuncts(case) if not z3.is_not(c)]
            decided += [(c.arg(0), z3.BoolVal(False)) for c in _conjuncts(case) if z3.is_not(c)]
            goal = z3.simplify(z3.substitute(ob.goal, *decided)) if decided else ob.goal
            out.append(replace(ob, id=ob.id + label, goal=goal, hyps={**ob.hyps, f"case:{label}": case}))
    return out


def _conjuncts(c):
    return [x for ch in c.children() for x in _conjuncts(ch)] if z3.is_and(c) else [c]


def obligations(run, prop: str) -> list:
    scoped = {label: cond for label, cond in run.hyps.items() if label.endswith(SCOPED)}
    hyps = run.hyps
    run.hyps = {label: cond for label, cond in hyps.items() if label not in scoped}
    try:
        obs = _obligations(run, prop)
    finally:
        run.hyps = hyps
    for ob in obs:   # a scoped precondition joins the no-wrap queries that mention its symbols
        for label, cond in scoped.items():
            if ob.kind == "wrap" and _shares_symbol(cond, ob.goal):
                ob.hyps[label[: -len(SCOPED)]] = cond
    return obs


def _shares_symbol(cond, goal) -> bool:
    names = {str(x) for x in subterms(cond) if z3.is_const(x) and not z3.is_int_value(x)} - {"K", "D"}
    return any(z3.is_const(x) and str(x) in names for x in subterms(goal))


def _bounds(run) -> list:
    """The bounds obligations, each with the lemma instances its tensor needs."""
    stores = {i: a for i, a in enumerate(run.result.accesses) if a.kind == "store"}
    out = []
    for ob in run.bounds_obligations():
        if ob.replay == ("oob", "req_to_token"):
            ob.lemmas = ob.lemmas + run.read_lemmas
        index = int(ob.id.split("#", 1)[1].split("/", 1)[0])
        if ob.replay == ("oob", "kv_indices") and index in stores:
            # the store's cell through its column: one instance, and the bound is linear
            _kind, (it, b, t, col) = _store_indices(run, stores[index])
            ob.lemmas = ob.lemmas + [symexec_lemmas.at(symexec_lemmas.kv_cell_in_buffer, P(b), P(num_seqs), b, num_seqs, t, it,
                                           seq_len(b), K, D, width, col)]
        out.append(ob)
    return out


def _obligations(run, prop) -> list:
    return generic(run, prop, bounds=_bounds,
                   executor=lambda r, kinds: split_by_program_cases(r, r.executor_obligations(kinds)),
                   races=lambda r: split_by_program_cases(r, race_obligations(r)),
                   footprints=lambda r: split_by_program_cases(r, footprint_obligations(r)))
