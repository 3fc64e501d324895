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
kernel whose lanes denote indices differently from its maps fails here; it never passes
silently.

This module is the machinery; each kernel's maps (which kernel variable is which index, which
lane is chosen for a cell) are ``footprint_obligations`` of its module in :mod:`.verifiers`.
"""

from __future__ import annotations

import z3

from .obligations import Obligation
from .values import LANES, Unsupported, V, dim_term, has_lane, mentions


def lane_term(a, name, axis):
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


def loop_var(run, a):
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
        if has_lane(size):
            goal.append(z3.And(LANES[ax] >= 0, LANES[ax] < dim_term(size)))
    goal += [a.mask] + [k == c for k, c in denoted]
    return Obligation(f"coverage-{a.tensor.name}@{a.line}#{i}", "coverage", a.line,
                      f"every spec cell {what} is stored by an active lane of some program "
                      f"({', '.join(str(c) for c in cells)} symbolic)", hyps, z3.And(*goal),
                      list(run.lemmas) + list(lemmas), replay=("output", a.tensor.name))


def stores_of(run):
    return [(i, a) for i, a in enumerate(run.result.accesses) if a.kind == "store"]


def request_lane(run, b, block):
    pid = run.result.pid[0]
    return [(pid, b / block), (LANES[0], b % block)]
