"""The symbolic batch the theorems quantify over, its hypotheses and its definitions.

Every parameter is an unbounded Z3 integer; ``seq_len`` is an uninterpreted function of
the request index and ``P`` its prefix sum, tied together only by the axioms
``P(0) = 0`` and ``P(i+1) = P(i) + seq_len(i)`` (so no batch size is ever fixed).
Hypotheses come from :mod:`specbound.spec.conditions`, so a theorem's preconditions are
literally the checks the reference performs at run time.

A parameter condition is a hypothesis under its spec name (``draft_tokens_fit_scores``);
a per-request condition is one quantified hypothesis (``seq_len_le_context``:
``forall i. 0 <= i < bs => seq_len(i) <= C``), used at a request index only through an
instance the core derives (:func:`instances`).
"""

from __future__ import annotations

import z3

from specbound import spec

from . import core
from .terms import applications
from .witness import table

IntSort = z3.IntSort()

# Parameters
bs, max_bs = z3.Ints("bs max_bs")
n, K, D, C = z3.Ints("n K D C")
page = z3.Int("page_size")
num_seqs = z3.Int("num_seqs")
width = z3.Int("width")  # a kv_indices row width handed in by the caller
fill = z3.Int("seq_len_fill")  # the seq_lens value a CUDA-graph runner gives its padded rows

# Indices
b, t, j, c, e = z3.Ints("b t j c e")
iters = z3.Int("iters")
_i = z3.Int("i")  # the bound index of every per-index formula

# Per-request data
seq_len = z3.Function("seq_len", IntSort, IntSort)
P = z3.Function("P", IntSort, IntSort)  # P(b) = sum_{i<b} seq_len(i)
Q = z3.Function("Q", IntSort, IntSort)  # Q(z) = sum_{z'<z} positions(z'), positions(z) = seq_len(z div K)

# Definitions of P and Q (fresh function symbols, so the axioms only name them)
PREFIX_ZERO = core.axiom("prefix_zero", P(0) == 0, "definition of P, the prefix sum of seq_len: P[0] = 0")
PREFIX_STEP = core.axiom(
    "prefix_step", z3.ForAll([_i], z3.Implies(_i >= 0, P(_i + 1) == P(_i) + seq_len(_i))),
    "definition of P, the prefix sum of seq_len: P[i+1] = P[i] + seq_len[i]")
POSITIONS_ZERO = core.axiom("positions_zero", Q(0) == 0,
                              "definition of Q, the prefix sum of the per-branch positions: Q[0] = 0")
POSITIONS_STEP = core.axiom(
    "positions_step", z3.ForAll([_i], z3.Implies(_i >= 0, Q(_i + 1) == Q(_i) + seq_len(_i / K))),
    "definition of Q: branch z of request z div K has seq_len[z div K] positions")


CLOSED_BATCH_MAX = 64  # a model is closed into a batch of at most this many requests
BATCH_SIZES = (bs, num_seqs)  # the request counts a model's batch is closed at (model searches shrink them too)


def _index_of(model, decl, arg, k):
    """The request index an application ``decl(arg)`` speaks of, or None."""
    value = model.eval(arg, model_completion=True)
    if not z3.is_int_value(value):
        return None
    index = value.as_long() - (0 if decl is seq_len else 1)  # P(x), Q(x) sum the entries before x
    if decl is Q:
        index = index // k if k >= 1 else -1
    return index if index >= 0 else None


def batch_indices(model: z3.ModelRef, terms=()) -> range:
    """The request indices a model speaks of: its batch (``bs`` or ``num_seqs`` requests, when
    at most :data:`CLOSED_BATCH_MAX`), every index its tables of ``seq_len``, ``P``, ``Q``
    hold, and every index at which ``terms`` apply them to a closed argument."""
    k = model.eval(K, model_completion=True).as_long()
    top = -1
    for size in BATCH_SIZES:  # the batch the model describes, when it is small enough to close
        value = model.eval(size, model_completion=True).as_long()
        if value <= CLOSED_BATCH_MAX:
            top = max(top, value - 1)
    for decl in (seq_len, P, Q):
        interp = model[decl] if decl in model else None
        for e in range(interp.num_entries() if interp is not None else 0):
            index = _index_of(model, decl, interp.entry(e).arg_value(0), k)
            top = max(top, -1 if index is None else index)
    by_name = {decl.name(): decl for decl in (seq_len, P, Q)}
    for app in {app.get_id(): app for term in terms for app in applications(term)}.values():
        decl = by_name.get(app.decl().name()) if app.num_args() == 1 else None
        # an argument with a bound variable (inside a quantifier) names no index of its own
        if decl is None or not z3.z3core.Z3_is_ground(app.ctx_ref(), app.arg(0).as_ast()):
            continue
        index = _index_of(model, decl, app.arg(0), k)
        if index is not None and index < CLOSED_BATCH_MAX:
            top = max(top, index)
    return range(top + 1)


def batch_completion(model: z3.ModelRef, terms=()):
    """``seq_len`` as the finite batch the model describes (its values at the indices of
    :func:`batch_indices`, 0 after them) and ``P``, ``Q`` as that batch's prefix sums, so
    ``prefix_zero``/``prefix_step`` and ``positions_zero``/``positions_step`` hold at every
    index; negative indices keep the model's values (the axioms say nothing of them).
    None when the batch exceeds :data:`CLOSED_BATCH_MAX` requests."""
    size = len(batch_indices(model, terms))
    k = model.eval(K, model_completion=True).as_long()
    if size > CLOSED_BATCH_MAX:
        return None
    x = z3.Var(0, IntSort)
    values = [model.eval(seq_len(j), model_completion=True) for j in range(size)]
    batch = z3.IntVal(0)
    for j in reversed(range(size)):
        batch = z3.If(x == j, values[j], batch)
    seq_term = z3.If(x < 0, table(model, seq_len), batch)
    p_term = z3.If(x < 0, table(model, P), z3.Sum([z3.If(j < x, values[j], 0) for j in range(size)] or [z3.IntVal(0)]))
    out = [(seq_len, seq_term), (P, p_term)]
    if k >= 1:
        # branches [j*K, (j+1)*K) belong to request j: Q(x) = sum_j seq_len[j] * clamp(x - j*K, 0, K)
        taken = [z3.If(x >= (j + 1) * k, k, z3.If(x <= j * k, 0, x - j * k)) for j in range(size)]
        q_sum = [values[j] * taken[j] for j in range(size)] or [z3.IntVal(0)]
        out.append((Q, z3.If(x < 0, table(model, Q), z3.Sum(q_sum))))
    return out  # with K < 1 the model's own Q stays, and positions_step is checked against it


# The axioms a spec theorem may rest on: what P and Q are (proofs.theorem refuses any other).
DEFINITIONS = {name: ax for fact in (PREFIX_ZERO, PREFIX_STEP, POSITIONS_ZERO, POSITIONS_STEP)
               for name, ax in core.facts(fact).axioms.items()}


def prefix_at(i) -> core.Proof:
    """``i >= 0 => P(i+1) = P(i) + seq_len(i)``."""
    return core.instantiate(PREFIX_STEP, i)


def positions_at(z) -> core.Proof:
    return core.instantiate(POSITIONS_STEP, z)


def forall_index(body) -> z3.BoolRef:
    """``forall i. body(i)`` over the request (or element) index."""
    return z3.ForAll([_i], body(_i))


def labelled(conditions) -> dict:
    """Spec conditions as hypotheses, under their names."""
    return {cond.name: cond.holds for cond in conditions}


def in_batch(i, size=None):
    size = bs if size is None else size
    return z3.And(0 <= i, i < size)


def per_request(*families, size=None) -> dict:
    """The conditions of every request of a batch of ``size`` (default ``bs``), one quantified
    hypothesis each, ``forall i. 0 <= i < size => cond(i)``: the one writer of per-request
    preconditions (spec theorems, lemmas, kernel models, their content preconditions).  A
    family maps the request index to spec Conditions or to ``{name: formula}``."""
    guard = in_batch(_i, size)
    out = {}
    for family in families:
        conds = family(_i)
        named = conds.items() if isinstance(conds, dict) else ((cond.name, cond.holds) for cond in conds)
        out.update({name: z3.ForAll([_i], z3.Implies(guard, holds)) for name, holds in named})
    return out


def instances(hyps: dict, *terms) -> list:
    """The core's instances at ``terms`` of every quantified hypothesis in ``hyps`` that binds
    ``len(terms)`` variables (each keeps its quantified hypothesis)."""
    return [core.instantiate(core.assume(label, f), *terms) for label, f in hyps.items()
            if z3.is_quantifier(f) and f.is_forall() and f.num_vars() == len(terms)]


def seq_len_conds(i):
    return spec.seq_len_ok(seq_len(i), C, name="seq_len[b]")


def draft_room_conds(i):
    return spec.draft_room_ok(seq_len(i), D, C, name="seq_len[b]")


def at_context_conds(i):
    """The worst-case batch: every request at the full context."""
    return (spec.Condition("seq_len_at_context", "seq_len[b] = max_context_len (worst case)",
                           seq_len(i) == C, "seq_len[b]"),)


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


def one_request() -> dict:
    """A request ``b`` of a well-formed batch (tree parameters, admitted lengths) with a positive
    page size: the hypotheses of the consumer theorems that judge one request's row."""
    hyps = {**tree_params(), "request_in_batch[b]": in_batch(b), "page_size_positive": page >= 1}
    hyps.update(per_request(seq_len_conds))
    return hyps
