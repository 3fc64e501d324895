"""Exact footprint obligations: the cells a kernel stores are exactly the spec's cells.

For every store of every kernel two obligations, both stated with the spec's cell
functions called on Z3 terms (``spec.mask_tree_cell``, ``spec.mask_prefix_cell``,
``spec.token_cell``, ``spec.kv_indices_cell`` of ``spec.kv_segment_start``,
``spec.kv_indptr_entry`` of ``spec.kv_positions_prefix``):

* **soundness** (kind ``footprint``): every active lane denotes a cell of the spec's
  footprint (its request / row / branch / column indices are in the spec's ranges) and its
  address is the spec's formula at those indices (for kv_indices, kv_indptr and
  retrive_index also the stored value: the request's ``req_to_token`` entry the spec names,
  the spec's indptr entry, the token's own cell; True for the prefix fill);
* **completeness** (kind ``coverage``): for every cell of the spec's footprint of the
  batch (symbolic indices in their ranges) the lane chosen as a function of the cell
  (``pid = b div BLOCK_B``, ``lane = b mod BLOCK_B``, loop index ``c0 = (c div BLOCK_C) *
  BLOCK_C``, pair lane ``K*(iters - 1) + t``, ...) is inside the grid, on the store's path,
  active, and denotes that cell's indices.  Binding the program id, lanes and loop index to
  these terms as hypotheses proves ``forall cell. exists lane``: the lane is the chosen term.

Soundness says every active lane stores the spec cell of the indices it denotes, so with
completeness every spec cell is stored, and nothing else is: the stored set equals the
spec's footprint.  (Stating the address equality inside the completeness query as well
makes Z3 re-derive soundness through the chosen terms' div/mod: 10-30 s instead of <1 s.)  A
kernel whose lanes denote indices differently from the maps below fails here; it never
passes silently.
"""

from __future__ import annotations

import z3

from specbound import spec
from specbound.proofs.model import D, K, P, bs, num_seqs, page, seq_len
from specbound.proofs.model import n as N

from . import lemmas as SL
from .obligations import Obligation
from .values import LANES, Unsupported, V, mentions


def _lane_term(a, name, axis):
    """The kernel variable ``name`` at the store's lanes: a value of the store's rank is
    taken as it is; a rank-1 value (an arange-derived index) lives on ``axis``."""
    v = a.env.get(name)
    if v is None:
        raise Unsupported(f"footprint map: kernel variable {name!r} not bound at the store", a.line)
    if isinstance(v, int):
        return z3.IntVal(v)
    if not isinstance(v, V):
        raise Unsupported(f"footprint map: {name!r} is not a value", a.line)
    if v.rank == len(a.shape):
        return v.e
    if v.rank == 1:
        return z3.substitute(v.e, (LANES[0], LANES[axis])) if axis else v.e
    raise Unsupported(f"footprint map: {name!r} of rank {v.rank} at a rank-{len(a.shape)} store", a.line)


def _loop_var(run, a):
    """The symbolic loop index the store runs under (None outside a symbolic loop)."""
    pids = {p.get_id() for p in run.result.pid}
    found = []
    for label, cond in a.path:
        if not label.startswith("loop_index@"):
            continue
        for c in run.result.local_consts:
            if c.get_id() not in pids and mentions(cond, c):
                found.append(c)
    if len(found) > 1:
        raise Unsupported("footprint map: store inside nested symbolic loops", a.line)
    return found[0] if found else None


def sound(run, a, i, what, idx_domain, cell, value=None, lemmas=()):
    parts = [idx_domain, a.off.e == cell]
    if value is not None:
        parts.append(a.value.e == value)
    return Obligation(f"footprint-{a.tensor.name}@{a.line}#{i}", "footprint", a.line,
                      f"every active lane stores {what}",
                      run.base_hyps(a.path, a.shape, a.mask), z3.And(*parts), list(run.lemmas) + list(lemmas),
                      replay=("output", a.tensor.name))


def cover(run, a, i, what, cells, domain, bind, denoted, lemmas=(), defs=None):
    """Completeness of one store: for every spec cell (``cells`` symbolic, in ``domain``)
    the lane chosen by ``bind`` ([(const, term)]: program id, lanes, loop index as functions
    of the cell) is in the grid, on the store's path and active, and denotes that cell
    (``denoted``: [(kernel index term, cell index)]).  With the soundness obligation of the
    same store (every active lane stores the spec cell of the indices it denotes) this is
    "every spec cell is stored".  ``defs``: [(label, formula)] naming helper indices."""
    hyps = dict(run.hyps)
    hyps["spec_footprint_cell"] = domain
    for label, f in defs or ():
        hyps[label] = f
    for const, term in bind:
        hyps[f"chosen_{const}"] = const == term
    goal = [cond for _label, cond in a.path]
    for ax, size in enumerate(a.shape):
        if size > 1:
            goal.append(z3.And(LANES[ax] >= 0, LANES[ax] < size))
    goal += [a.mask] + [k == c for k, c in denoted]
    return Obligation(f"coverage-{a.tensor.name}@{a.line}#{i}", "coverage", a.line,
                      f"every spec cell {what} is stored by an active lane of some program "
                      f"({', '.join(str(c) for c in cells)} symbolic)", hyps, z3.And(*goal),
                      list(run.lemmas) + list(lemmas), replay=("output", a.tensor.name))


def _stores(run):
    return [(i, a) for i, a in enumerate(run.result.accesses) if a.kind == "store"]


def _request_lane(run, b, block):
    pid = run.result.pid[0]
    return [(pid, b / block), (LANES[0], b % block)]


# --- tree build ---------------------------------------------------------------------------

def tree_obligations(run) -> list:
    mode = spec.TreeMaskMode(run.spec.MODE)
    block = run.spec.BLOCK_B
    out = []
    fb, ft, fj = z3.Ints("cell_b cell_t cell_j")
    for i, a in _stores(run):
        b = _lane_term(a, "b", 0)
        name = a.tensor.name
        if name == "tree_mask":
            if mode is spec.TreeMaskMode.QLEN_ONLY_BITPACKING:
                t, j = _lane_term(a, "node2", 1), z3.IntVal(0)
                cols = spec.mask_tree_columns(mode, N)
            else:
                t, j = _lane_term(a, "t3", 2), _lane_term(a, "c3", 2)
                cols = spec.mask_tree_columns(mode, N)
            dom = lambda b_, t_, j_: z3.And(0 <= b_, b_ < bs, 0 <= t_, t_ < N, 0 <= j_, j_ < cols)
            cell = lambda b_, t_, j_: spec.mask_tree_cell(mode, b_, t_, j_, N, seq_len(b_), P(b_))
            out.append(sound(run, a, i, f"spec.mask_tree_cell({mode.name}, b, t, j, ...) of its (b, t, j)",
                             dom(b, t, j), cell(b, t, j)))
            bind = _request_lane(run, fb, block) + [(LANES[1], ft)]
            if mode is not spec.TreeMaskMode.QLEN_ONLY_BITPACKING:
                bind.append((LANES[2], fj))
            out.append(cover(run, a, i, "spec.mask_tree_cell(b < bs, t < n, j < mask_tree_columns)",
                             (fb, ft, fj), dom(fb, ft, fj), bind, [(b, fb), (t, ft), (j, fj)]))
        else:
            t = _lane_term(a, "node2", 1)
            dom = lambda b_, t_: z3.And(0 <= b_, b_ < bs, 0 <= t_, t_ < N)
            value = spec.token_cell(b, t, N) if name == "retrive_index" else None
            out.append(sound(run, a, i, "spec.token_cell(b, t, n) of its (b, t)"
                             + (" with that value" if value is not None else ""),
                             dom(b, t), spec.token_cell(b, t, N), value))
            out.append(cover(run, a, i, "spec.token_cell(b < bs, t < n)", (fb, ft), dom(fb, ft),
                             _request_lane(run, fb, block) + [(LANES[1], ft)], [(b, fb), (t, ft)]))
    return out


def fill_obligations(run) -> list:
    mode = spec.TreeMaskMode.FULL_MASK
    block, block_c = run.spec.BLOCK_B, run.spec.BLOCK_C
    out = []
    fb, ft, fc = z3.Ints("cell_b cell_t cell_c")
    for i, a in _stores(run):
        b, t, c = _lane_term(a, "b", 0), _lane_term(a, "t3", 2), _lane_term(a, "c", 2)
        dom = lambda b_, t_, c_: z3.And(0 <= b_, b_ < bs, 0 <= t_, t_ < N,
                                        0 <= c_, c_ < spec.mask_prefix_columns(mode, seq_len(b_)))
        cell = lambda b_, t_, c_: spec.mask_prefix_cell(mode, b_, t_, c_, N, seq_len(b_), P(b_))
        # the prefix columns are visible to every draft token: the fill stores True
        out.append(sound(run, a, i, "spec.mask_prefix_cell(FULL, b, t, c, ...) of its (b, t, c), with value True",
                         dom(b, t, c), cell(b, t, c), z3.BoolVal(True)))
        c0 = _loop_var(run, a)
        bind = _request_lane(run, fb, block) + [(LANES[1], ft), (LANES[2], fc % block_c)]
        if c0 is None:
            raise Unsupported("fill_prefix_kernel: the prefix store is expected inside the column loop", a.line)
        bind.append((c0, (fc / block_c) * block_c))
        out.append(cover(run, a, i, "spec.mask_prefix_cell(b < bs, t < n, c < seq_len[b])", (fb, ft, fc),
                         dom(fb, ft, fc), bind, [(b, fb), (t, ft), (c, fc)]))
    return out


# --- draft kv -----------------------------------------------------------------------------

def kv_obligations(run) -> list:
    block, block_c = run.spec.BLOCK_B, run.spec.BLOCK_C
    width, stride = run.report["width"], run.report["indptr_stride"]
    out = []
    fi, fb, ft, fc, fz = z3.Ints("cell_iters cell_b cell_t cell_c cell_z")
    pair = K * (fi - 1) + ft        # the pair lane of (iters, t): q = (iters - 1)*K + t
    pair_lemmas = [SL.at(SL.div_unique, fi - 1, ft, K), SL.at(SL.div_unique, fi - 1, ft, K),
                   K_mul(fi, D, K)]
    branch = lambda it_, b_, t_: z3.And(1 <= it_, it_ <= D, 0 <= b_, b_ < num_seqs, 0 <= t_, t_ < K)
    seg = lambda it_, b_, t_: spec.kv_segment_start(P(b_), b_, t_, K, it_, seq_len(b_))
    # req_to_token[row, pos], row-major with the model's strides (width, 1)
    r2t, pool_row, r2t_width = run.functions["req_to_token"][0], run.functions["pool_row"][0], run.report["r2t_width"]
    token = lambda b_, pos: r2t(pool_row(b_) * r2t_width + pos)
    indptr = [(i, a) for i, a in _stores(run) if a.tensor.name == "kv_indptr"]
    entry0_line = max(a.line for _i, a in indptr) if indptr else -1
    for i, a in _stores(run):
        if a.tensor.name == "kv_indices":
            b, it, t = _lane_term(a, "b", 0), _lane_term(a, "iters", 1), _lane_term(a, "t", 1)
            c0 = _loop_var(run, a)
            if c0 is not None:   # prefix slots: column c < seq_len of the segment
                c = _lane_term(a, "c", 2)
                dom = lambda it_, b_, t_, c_: z3.And(branch(it_, b_, t_), 0 <= c_, c_ < seq_len(b_))
                cell = lambda it_, b_, t_, c_: spec.kv_indices_cell(width, it_, seg(it_, b_, t_) + c_)
                what = "spec.kv_indices_cell(width, iters, kv_segment_start(...) + c), c < seq_len[b]"
                source = "req_to_token[row, c]"
                value = token(b, c)
                bind = [(c0, (fc / block_c) * block_c), (LANES[2], fc % block_c)]
            else:                # extension slots: e < iters after the prefix
                c = _lane_term(a, "e", 2)
                dom = lambda it_, b_, t_, c_: z3.And(branch(it_, b_, t_), 0 <= c_, c_ < it_)
                cell = lambda it_, b_, t_, c_: spec.kv_indices_cell(width, it_, seg(it_, b_, t_) + seq_len(b_) + c_)
                what = "spec.kv_indices_cell(width, iters, kv_segment_start(...) + seq_len[b] + e), e < iters"
                source = "req_to_token[row, spec.kv_extension_read(seq_len[b], t, e, K, D, page_size)]"
                value = token(b, spec.kv_extension_read(seq_len(b), t, c, K, D, page))
                bind = [(LANES[2], fc)]
            out.append(sound(run, a, i, what + f" of its (iters, b, t, c), with value {source}",
                             dom(it, b, t, c), cell(it, b, t, c), value))
            bind = _request_lane(run, fb, block) + [(LANES[1], pair)] + bind
            out.append(cover(run, a, i, what, (fi, fb, ft, fc), dom(fi, fb, ft, fc), bind,
                             [(b, fb), (it, fi), (t, ft), (c, fc)], pair_lemmas))
        elif a.line != entry0_line:   # entry z = b*K + t + 1 of row iters - 1
            b, it, t = _lane_term(a, "b", 0), _lane_term(a, "iters", 1), _lane_term(a, "t", 1)
            z = b * K + t + 1
            value = spec.kv_indptr_entry(spec.kv_positions_prefix(P(b), t + 1, K, seq_len(b)), z, it)
            out.append(sound(run, a, i, "spec.kv_indices_cell(indptr_stride, iters, z) for z = b*K + t + 1 with "
                             "value spec.kv_indptr_entry(kv_positions_prefix(P[b], t + 1, K, seq_len[b]), z, iters)",
                             branch(it, b, t), spec.kv_indices_cell(stride, it, z), value))
            # every entry 1 <= z <= bs_d: the branch before it is (b, t) = ((z-1) div K, (z-1) mod K)
            dom = z3.And(1 <= fi, fi <= D, 1 <= fz, fz <= spec.draft_branches(num_seqs, K))
            defs = [("cell_b_of_z", fb == (fz - 1) / K), ("cell_t_of_z", ft == (fz - 1) % K)]
            lem = pair_lemmas + [SL.at(SL.div_mod_range, fz - 1, K), SL.at(SL.div_lt, fz - 1, K, num_seqs)]
            out.append(cover(run, a, i, "spec.kv_indices_cell(indptr_stride, iters, z), 1 <= z <= bs_d",
                             (fi, fz), dom, _request_lane(run, fb, block) + [(LANES[1], pair)],
                             [(b, fb), (it, fi), (t, ft), (z, fz)], lem, defs))
        else:                          # entry 0 of every row, by program 0
            it = _lane_term(a, "i", 0) + 1
            out.append(sound(run, a, i, "spec.kv_indices_cell(indptr_stride, iters, 0) with value "
                             "spec.kv_indptr_entry(0, 0, iters)", z3.And(1 <= it, it <= D),
                             spec.kv_indices_cell(stride, it, 0), spec.kv_indptr_entry(0, 0, it)))
            out.append(cover(run, a, i, "spec.kv_indices_cell(indptr_stride, iters, 0)", (fi,),
                             z3.And(1 <= fi, fi <= D), [(run.result.pid[0], z3.IntVal(0)), (LANES[0], fi - 1)],
                             [(it, fi)]))
    return out


def K_mul(x, y, z):
    from specbound.proofs import kernel as K_
    from specbound.proofs import lemmas as L
    return K_.instantiate(L.mul_le_mono(), x, y, z)


def obligations(run) -> list:
    kind = run.name
    if kind == "KV":
        return kv_obligations(run)
    if kind == "FILL-PREFIX":
        return fill_obligations(run)
    return tree_obligations(run)
