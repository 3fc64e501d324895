"""Judge a traced allocation against what the kernel writes into it, per the spec, through
the trusted core.

The batch is the spec theorems' symbolic batch (:mod:`specbound.proofs.model`): ``bs``
requests with an uninterpreted ``seq_len`` and its prefix sum ``P``; ``S = P(bs)``.
Facts about ``P(bs)`` come from lemmas proved by induction (``VM-PREFIX-BOUND``,
``L-PREFIX-ROOM``), cited through :func:`core.instantiate` (with the per-request
conditions they rest on among the hypotheses).

* The kv_indices buffer of the draft kernel: its grid writes every one of the ``D`` rows;
  row ``D - 1`` uses ``spec.draft_kv_indices_used_len(S, K, bs*K, D)`` slots of the row
  stride the launch passes, the last at flat cell ``spec.kv_indices_cell(stride, D, used - 1)``.
  Stated preconditions: the kv kernel's contract (``spec.kv_shape_ok``, ``seq_len[b] <= C``
  and room for the draft tokens, ``seq_len[b] + D <= C``, which the spec's reference
  checks), ``bs <= max_bs`` for a buffer captured at ``max_bs``.
* The tree mask: ``spec.mask_batch_numel(mode, bs, n, S)`` cells in the layout the tree
  build is called with.  Stated preconditions: ``spec.tree_shape_ok``, ``seq_len[b] <= C``,
  ``bs <= max_bs``.

Verdicts: ``matched`` (``core.check`` proved the buffer large enough); ``holds only if``
(refuted, but proved once every request also satisfies one of the conditions the engine relies
on, its bindings' ``extra_conditions``, checking none of them; the weakest of that family, and
the counterexample without it); ``overrun`` (refuted even so).  The path conditions under which the tracer found the
allocation are hypotheses too; a path they make infeasible is skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import z3

from specbound import spec
from specbound.proofs import core, minimise
from specbound.proofs.lemmas import prefix_bound, prefix_room
from specbound.proofs.model import C, D, K, P, bs, labelled, max_bs, n, page

from .engine_bindings import QUANTITIES, Bindings, ExtraCondition

S = QUANTITIES["seq_lens_sum"]
MATCHED, OVERRUN, HOLDS_ONLY_IF, INFEASIBLE, ERROR = "matched", "overrun", "holds only if", "infeasible", "error"

# Every variable a counterexample may report, in the order the minimiser makes them small;
# per kernel, the ones its requirement mentions.
REPORTED = (("bs", bs), ("max_bs", max_bs), ("topk", K), ("num_steps", D), ("num_draft_tokens", n),
            ("max_context_len", C), ("seq_lens_sum", S), ("page_size", page))
REPORTED_BY_KIND = {"draft_kv_indices": ("bs", "max_bs", "topk", "num_steps", "max_context_len", "seq_lens_sum"),
                    "tree_mask": ("bs", "max_bs", "topk", "num_steps", "num_draft_tokens", "max_context_len",
                                  "seq_lens_sum")}
# A verify mask copied into a backend's custom-mask buffer (and read through mask_indptr); a
# target-verify kv-index stream written into a backend's graph kv_indices buffer.
REPORTED_BY_KIND["custom_mask_copy"] = REPORTED_BY_KIND["tree_mask"]
REPORTED_BY_KIND["verify_kv_indices"] = REPORTED_BY_KIND["tree_mask"]
# A backend's own launch of the kv-index kernel (lengths widened by a delta); its graph buffers
# are sized in pages.
REPORTED_BY_KIND["direct_kv_indices"] = (*REPORTED_BY_KIND["tree_mask"], "page_size")


@dataclass
class Judgement:
    verdict: str
    required: str = ""                 # the spec's required extent, as a formula
    size: str = ""                     # the allocation's extent, as a formula
    condition: str = ""                # for `holds only if`: the extra condition
    counterexample: dict | None = None  # without the extra condition (overrun / holds only if)
    detail: str = ""
    assumptions: list = field(default_factory=list)
    seconds: float = 0.0


def settled(name: str, goal, hyps: dict, required: str, size: str, proved: str) -> Judgement | None:
    """``INFEASIBLE`` when no input meets ``hyps``, ``MATCHED`` when the core proves ``goal`` under
    them (``proved`` then the list of hypotheses used), None when it is refuted (the caller says
    how).  ``core.Unknown`` propagates: no verdict is not a pass."""
    if core.satisfy(f"{name}/feasible", hyps) is None:
        return Judgement(INFEASIBLE, required, size)
    try:
        proof = core.check(f"{name}/fits", goal, hyps=hyps)
    except core.Refuted:
        return None
    used = sorted(proof.assumptions)
    return Judgement(MATCHED, required, size, assumptions=used, detail=f"{proved} {', '.join(used)}")


# --- requirements -----------------------------------------------------------------------

def kv_goal(numel, stride):
    used = spec.draft_kv_indices_used_len(S, K, spec.draft_branches(bs, K), spec.draft_kv_capacity_steps(D))
    last = spec.kv_indices_cell(stride, D, used - 1)
    goal = z3.Implies(used >= 1, z3.And(used <= stride, last < numel))
    return goal, f"rows {D} of used_len(S, K, bs*K, D) = {z3.simplify(used)} slots each (stride {stride})"


def mask_goal(numel, mode):
    need = spec.mask_batch_numel(mode, bs, n, S)
    return numel >= need, f"{z3.simplify(need)} ({mode.name}, spec.mask_batch_numel)"


def custom_mask_need(mode):
    """Cells of the mask copied into a backend's buffer: the tree build's, in its layout
    (FULL_MASK is what the attention kernels read through ``mask_indptr``)."""
    if mode is None or mode is spec.TreeMaskMode.FULL_MASK:
        return spec.custom_mask_batch_read(bs, n, S)
    return spec.mask_batch_numel(mode, bs, n, S)


def custom_mask_goal(numel, mode):
    need = custom_mask_need(mode)
    source = "mask_indptr[bs], spec.custom_mask_batch_read" if mode in (None, spec.TreeMaskMode.FULL_MASK) \
        else f"{mode.name}, spec.mask_batch_numel"
    return numel >= need, f"{z3.simplify(need)} ({source})"


def verify_kv_goal(numel):
    need = spec.verify_kv_indices_written(bs, n, S)
    return numel >= need, f"{z3.simplify(need)} (kv_indptr[bs], spec.verify_kv_indices_written)"


def direct_kv_goal(numel, delta):
    need = spec.direct_kv_indices_written(bs, delta, S)
    return numel >= need, f"{z3.simplify(need)} (kv_indptr[bs], spec.direct_kv_indices_written)"


def contract(kind: str, mode=None) -> tuple[dict, list]:
    """The stated preconditions (hypotheses) and the lemma instances they give."""
    hyps = {**labelled(spec.max_bs_ok(max_bs)), **labelled(spec.batch_size_ok(bs)), **labelled(spec.context_ok(C)),
            "captured_batch_fits": bs <= max_bs, "seq_lens_sum_is_prefix": S == P(bs)}
    lemmas = [core.instantiate(prefix_bound(), bs)]
    if kind == "draft_kv_indices":
        hyps.update(labelled(spec.kv_shape_ok(K, D, page)))
        lemmas.append(core.instantiate(prefix_room(), bs))
    else:
        hyps.update(labelled(spec.tree_shape_ok(K, D, n)))
        if mode is spec.TreeMaskMode.QLEN_ONLY_BITPACKING:
            hyps.update(labelled(spec.bitpack_ok(n)))
        if kind == "direct_kv_indices":
            hyps["page_size_positive"] = page >= 1
    for lemma in lemmas:
        # A core whose proofs are sequents cites a lemma only under its own hypotheses (the
        # per-request conditions it was proved from): they are preconditions here too.
        hyps.update(getattr(lemma, "hyps", None) or {})
    return hyps, lemmas


def _extent_text(dims) -> str:
    return " x ".join(str(z3.simplify(d)) if isinstance(d, z3.ExprRef) else str(d) for d in dims)


def judge(kind: str, dims, conds, *, bindings: Bindings, stride=None, mode=None, delta=None,
          name="buffer") -> Judgement:
    """One allocation (its ``dims``, found under path ``conds``) against the kernel ``kind``;
    the engine's ``bindings`` say what it relies on unchecked (``extra_conditions``);
    ``delta``: the draft tokens a direct kv-index launch adds to each length."""
    numel = 1
    for d in dims:
        numel = numel * d
    if kind == "draft_kv_indices":
        goal, required = kv_goal(numel, stride if stride is not None else dims[-1])
    elif kind == "custom_mask_copy":
        goal, required = custom_mask_goal(numel, mode)
    elif kind == "verify_kv_indices":
        goal, required = verify_kv_goal(numel)
    elif kind == "direct_kv_indices":
        goal, required = direct_kv_goal(numel, delta)
    else:
        goal, required = mask_goal(numel, mode)
    size = _extent_text(dims)
    hyps, lemmas = contract(kind, mode)
    for i, c in enumerate(conds):
        hyps[f"path_{i}"] = c
    try:
        if core.satisfy(f"{name}/feasible", hyps, by=lemmas) is None:
            return Judgement(INFEASIBLE, required, size, detail="the path conditions contradict the preconditions")
        try:
            proof = core.check(f"{name}/fits", goal, hyps=hyps, by=lemmas)
            return Judgement(MATCHED, required, size, assumptions=sorted(proof.assumptions),
                             detail=f"proved for all inputs under {', '.join(sorted(proof.assumptions)) or 'no hypothesis'}")
        except core.Refuted:
            pass
        cex = counterexample(hyps, lemmas, goal, REPORTED_BY_KIND[kind])
        for extra in bindings.extra_conditions.get(kind, ()):
            try:
                core.check(f"{name}/fits_if_{extra.name}", goal, hyps={**hyps, **summed(extra)}, by=lemmas)
            except core.Refuted:
                continue
            return Judgement(HOLDS_ONLY_IF, required, size, condition=extra.text, counterexample=cex,
                             detail=_weakest(extra, hyps, lemmas, goal, name, REPORTED_BY_KIND[kind],
                                             bindings.engine))
        return Judgement(OVERRUN, required, size, counterexample=cex,
                         detail="refuted under the stated preconditions")
    except core.Unknown as e:
        return Judgement(ERROR, required, size, detail=f"the solver gave no verdict: {e}")


def summed(extra: ExtraCondition, slack: int = 0) -> dict:
    """The per-request condition ``seq_len[b] + h <= C`` as the hypothesis on its batch,
    ``S + bs*h <= bs*C``.  Both requirements depend on the batch only through ``bs`` and
    ``S``, and some split of ``S`` meets the per-request condition exactly when the sum
    does, so the verdict is the same (``slack``: that many slots less of headroom)."""
    return {f"{extra.name}_summed": P(bs) + bs * (extra.headroom - slack) <= bs * C}


def _weakest(extra: ExtraCondition, hyps, lemmas, goal, name, names, engine: str) -> str:
    """Show the condition is the weakest of its family: with one slot less of headroom for
    every request (``seq_len[b] + h - 1 <= C``) there is still a counterexample."""
    m = core.satisfy(f"{name}/weaker", {**hyps, **summed(extra, 1), "negated_goal": z3.Not(goal)}, by=lemmas)
    if m is None:
        return f"proved given {extra.text} for every request; {engine} does not check it"
    return (f"proved given {extra.text} for every request; {engine} does not check it. The weakest of its kind: "
            f"with one slot less (seq_len[b] + h - 1 <= C) it fails, e.g. {_values(m.model, names)}")


# --- counterexamples ---------------------------------------------------------------------

def _values(model, names=None, reported=REPORTED) -> dict:
    out = {}
    for name, var in reported:
        if names is not None and name not in names:
            continue
        v = model.eval(var, model_completion=True)
        if isinstance(v, z3.IntNumRef):
            out[name] = v.as_long()
    return out


def counterexample(hyps: dict, lemmas: list, goal, names, reported=REPORTED, prefs=None) -> dict | None:
    """A small counterexample (:func:`minimise.smallest_model`): the ``names`` of ``reported``
    made small in that order.  Shapes a replay can launch are asked for first (a real tree:
    ``n >= 2``; at least one request)."""
    prefs = [bs >= 1, n >= 2] if prefs is None else prefs
    return minimise.smallest_model("counterexample", {**hyps, "negated_goal": z3.Not(goal)},
                                   {name: var for name, var in reported if name in names}, by=lemmas, prefs=prefs)


def evaluate(term, values: dict, reported=REPORTED):
    """``term`` at a counterexample (the ``reported`` quantities substituted by name); an int when
    fully concrete, a plain value unchanged."""
    subs = [(var, z3.IntVal(values[name])) for name, var in reported if name in values]
    if not isinstance(term, z3.ExprRef):
        return term
    r = z3.simplify(z3.substitute(term, *subs))
    return r.as_long() if isinstance(r, z3.IntNumRef) else None


def seq_lens_for(values: dict, cap: int) -> list[int] | None:
    """Per-request ``seq_len`` summing to the counterexample's ``S``, each at most ``cap``."""
    total, count = values.get("seq_lens_sum", 0), values.get("bs", 0)
    if count <= 0 or total > count * cap or total < 0:
        return None
    out = []
    for _ in range(count):
        take = min(cap, total)
        out.append(take)
        total -= take
    return out
