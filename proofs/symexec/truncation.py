"""The no-truncation analysis: a lane mask ``base + arange(N) < x`` must not cut lanes off.

A block of ``N`` lanes that stands for the first ``x`` items handles all of them only when
``x <= N`` (``base`` 0), ``x <= the loop bound`` (a tiled loop ``c0 + arange``) or
``x <= grid * N`` (a program-tiled ``pid * N + arange``).  Values carry a
:class:`~.values.LaneTag` for these shapes (set by ``tl.arange`` and loops, moved by
reshapes and broadcasts, combined by ``+`` here).  The bound is raised where the comparison
is a conjunct of a load/store mask, under the other conjuncts (:func:`mask_bounds`), and, for
a comparison that never reaches a mask, for every lane at the end of the run
(:func:`finish`).
"""

from __future__ import annotations

import z3

from .run_state import Ob, RunState
from .values import LANES, LaneTag, SymDim, V, as_int, conjuncts, dim_term, lane_vars_in, mentions

_PLACEHOLDER = z3.Int("lane?")


def sum_tag(ex: RunState, a: V, b: V) -> LaneTag | None:
    """The tag of ``a + b`` (operands broadcast): an arange plus a loop index or ``pid * N``."""
    for lane_v, other in ((a, b), (b, a)):
        tag, otag = lane_v.tag, other.tag
        if tag is not None and tag.axis >= 0 and tag.kind == "arange" and not lane_vars_in(other.e):
            if otag is not None and otag.kind == "loopvar":
                return LaneTag(tag.axis, tag.size, other.e, "loop", otag.loop)
            if _is_pid_times(other.e, ex.pid, tag.size):
                return LaneTag(tag.axis, tag.size, other.e, "grid")
            return None
    return None


def note_comparison(ex: RunState, lane_v: V, bound: V, shape, line):
    """Record ``base + arange(N) < x``; its bound is raised by :func:`mask_bounds` or
    :func:`finish`."""
    tag = lane_v.tag
    if tag is None or tag.axis < 0:
        return
    if lane_vars_in(bound.e) & {tag.axis}:
        return
    ex.trunc_candidates.append((line, tag, as_int(bound.e), list(ex.path_cond), shape))


def mask_bounds(ex: RunState, mask_e, shape, line):
    """Raise the bound of every ``base + lane < x`` conjunct of a load/store mask."""
    parts = conjuncts(mask_e)
    for i, p in enumerate(parts):
        if not (z3.is_app(p) and p.decl().kind() == z3.Z3_OP_LT):
            continue
        lhs, x = p.children()
        k = base = None
        for ax, lane in enumerate(LANES):
            if lhs.eq(lane):
                k, base, kind = ax, 0, "arange"
            elif z3.is_app(lhs) and lhs.decl().kind() == z3.Z3_OP_ADD and lhs.num_args() == 2:
                a0, a1 = lhs.children()
                for bb, ll in ((a0, a1), (a1, a0)):
                    if ll.eq(lane) and not lane_vars_in(bb):
                        if str(bb) in ex.loops:
                            k, base, kind = ax, bb, "loop"
                        elif _is_pid_times(bb, ex.pid, shape[ax] if ax < len(shape) else -1):
                            k, base, kind = ax, bb, "grid"
            if k is not None:
                break
        if k is None or k >= len(shape) or (k in lane_vars_in(x)):
            continue
        goal, note = _bound(ex, kind, shape[k], base, x)
        others = z3.And(*(parts[:i] + parts[i + 1:])) if len(parts) > 1 else True
        ex.trunc_raised.add(_lane_free_key(x, kind))
        ex.raise_ob("truncation", line, goal, shape, note + " (where the other mask conjuncts hold)", others)


def finish(ex: RunState):
    """Raise, for every lane, the bounds of the comparisons no mask raised."""
    for line, tag, x, path, shape in ex.trunc_candidates:
        if _lane_free_key(x, tag.kind) in ex.trunc_raised:
            continue  # raised where it is a mask conjunct
        goal, note = _bound(ex, tag.kind, tag.size, tag.base, x)
        ex.obligations.append(Ob("truncation", line, goal, path, tuple(shape), note + " (every lane)", True))


def _bound(ex: RunState, kind, size, base, x):
    if kind == "arange":
        return x <= dim_term(size), f"mask arange({size}) < x needs x <= {size}"
    if kind == "loop":
        stop, _step = ex.loops[str(base)]
        return x <= stop, "a tiled loop's mask c0 + arange < x needs x <= the loop bound (every column visited)"
    g = ex.grid[[i for i, p in enumerate(ex.pid) if mentions(base, p)][0]]
    return x <= g * dim_term(size), f"a program-tiled mask pid*{size} + arange < x needs x <= grid*{size}"


def _is_pid_times(e, pids, size) -> bool:
    """``pid * size`` (in either order; a symbolic length is its constexpr's term)."""
    if not (z3.is_app(e) and e.decl().kind() == z3.Z3_OP_MUL and e.num_args() == 2):
        return False
    a, b = e.children()
    for p, k in ((a, b), (b, a)):
        if any(p.eq(q) for q in pids) and (k.eq(size.term) if isinstance(size, SymDim)
                                           else z3.is_int_value(k) and k.as_long() == size):
            return True
    return False


def _lane_free_key(x, kind):
    return (kind, z3.substitute(x, *[(l, _PLACEHOLDER) for l in LANES]).sexpr())
