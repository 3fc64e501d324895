"""The trusted core: the only code that makes a :class:`Proof`.

A ``Proof`` is a sequent ``hyps |- goal``: ``hyps`` maps labels to formulas, and the proof
says that ``And(hyps) => goal`` holds in every interpretation of the free constants and
uninterpreted functions that satisfies the axioms the proof rests on (``Proof.axioms``,
collected through every cited lemma).  Labels are names for reports; the core never reads
meaning into them.  Everything outside this module (theorems, reports, the symbolic
executor, the CLI) is untrusted and can only ask, but for two modules that are the core's
too: :mod:`.core_arguments` (what a formula, a hypothesis map and the limits must be, on the
terms alone) and :mod:`.core_query` (its one solver query).

The rules, and why each is sound:

* :func:`axiom` ``(name, formula, reason)``:  ``|- formula``, resting on the axiom ``name``.
  Not checked: an axiom is assumed, and every proof that uses it lists it.
* :func:`assume` ``(label, formula)``:  ``{label: formula} |- formula``.
* :func:`check`: ``H' |- goal`` when Z3 answers ``unsat`` for ``H /\\ lemmas /\\ not goal``,
  where ``H'`` is the part of ``H`` in the unsat core.  A cited lemma ``G |- g`` enters as
  ``And(G_rest) => g``, where ``G_rest`` are its hypotheses that are not (syntactically)
  hypotheses of this check; the others are discharged by this check's hypotheses of the
  same formula, which join ``H'`` when the lemma is in the core.  So no hypothesis is ever
  dropped.  Hypotheses whose formula is a ``ForAll`` are not sent to Z3 (the query stays
  quantifier free); they discharge lemma hypotheses, typically instances made by
  ``instantiate(assume(label, forall), term)``.  The goal must be in the unsat core:
  contradictory hypotheses or lemmas never prove anything (with nothing else asserted, the
  negated goal alone is the query).
* :func:`instantiate`: from ``H |- forall vs. body`` derive ``H |- body[vs := terms]``.
* :func:`generalise`: from ``H |- phi`` derive ``H |- forall cs. phi`` when no constant of
  ``cs`` is free in a hypothesis of ``H`` or in an axiom the proof rests on.
* :func:`check_forall`: :func:`check` at fresh constants, then :func:`generalise`.
* :func:`induct`: from ``H_b |- phi(0)`` and ``H_s, k >= 0, phi(k) |- phi(k + 1)`` (both by
  :func:`check`; the core computes ``phi(0)``, ``phi(k)``, ``phi(k + 1)`` from one formula)
  derive ``H_b, H_s |- forall v, ps. v >= 0 => phi(v, ps)`` when ``k`` and the parameters
  ``ps`` are free in no hypothesis of ``H_b, H_s`` and in no axiom, and ``k`` does not occur
  in ``phi`` itself.  A per-index fact (a recurrence, a per-request precondition) is
  therefore a quantified hypothesis or an axiom, instantiated by the core at ``k``; a label
  convention can no longer smuggle one in.

The core's own constants never meet a caller's: Z3 identifies a constant by its name and
sort, and the core's names (the tracking literals of a query, the fresh constants of
``check_forall`` and ``induct``) can be known or guessed, so the core checks on the terms
themselves that no supplied formula contains one (a goal naming a cited lemma's tracking
literal would otherwise be proved by the core's own assumption of it), and strips its
tracking literals from every model it hands out.  A Proof is exactly an object the core
issued: the class cannot be subclassed, and the registry is keyed by identity, so no
``__eq__``/``__hash__`` takes part in a lookup; readers that judge proofs use :func:`facts`.

Solver settings are fixed here: every query runs in a fresh Z3 context (its verdict and cost
then depend on the query alone), with the rlimit and seed the caller names (both recorded
in the Proof) and the core's own timeout backstop.  A global Z3 parameter that bears on
verdicts (timeout, rlimit, seeds, arithmetic solver, ...), changed outside the core
(``z3.set_param``), is an error at the next core call, as it would leak into the fresh
contexts; every other global parameter is reset to its default before a query.  ``sat`` yields :class:`Refuted` with a model, ``unknown`` :class:`Unknown`;
neither ever yields a Proof.

:func:`satisfy` is the one function here that is not a rule: it searches a model (a
witness or a counterexample), never makes a Proof, and is here only to build its query
exactly as :func:`check` would; its narrowing asks (a shrink) ask that query's own solver
again, each with one more formula in a scope of its own, checked like every other.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping, Sequence

import z3

from .core_arguments import check_limits, closed_formula, hyp_map, in_main, loose_variable, occurs
from .core_query import TAG as _TAG
from .core_query import SettingsError, ask_again, model_without, query

DEFAULT_RLIMIT = 2_000_000

class Refuted(Exception):
    """The goal is false under the hypotheses: ``model`` is a counterexample."""

    def __init__(self, name: str, model: z3.ModelRef, seconds: float, rlimit: int, note: str = ""):
        super().__init__(f"{name}: refuted (counterexample found){note}")
        self.name, self.model, self.seconds, self.rlimit = name, model, seconds, rlimit


class Unknown(Exception):
    """Z3 gave no verdict within the rlimit: a failure, never a proof."""

    def __init__(self, name: str, reason: str, seconds: float, rlimit: int):
        super().__init__(f"{name}: unknown ({reason})")
        self.name, self.reason, self.seconds, self.rlimit = name, reason, seconds, rlimit


class RuleError(ValueError):
    """An inference rule was asked for a step its side condition forbids."""


@dataclass(frozen=True)
class Axiom:
    name: str
    formula: z3.BoolRef
    reason: str


@dataclass(frozen=True)
class _Facts:
    """What a Proof says.  Kept by the core, not on the Proof object: code outside the core
    can write any attribute of an object it holds (``object.__setattr__``), so a Proof that
    carried its own goal could be edited into a proof of anything after it was issued."""

    name: str
    hyps: Mapping
    goal: z3.BoolRef
    axioms: Mapping
    cited: tuple
    kind: str
    seconds: float
    rlimit: int


class _Sealed(type):
    def __new__(mcs, name, bases, namespace, **kwargs):
        if any(isinstance(base, _Sealed) for base in bases):
            # A subclass could override __eq__/__hash__ (aliasing a real proof in a lookup) or
            # the accessors (reading another goal); there is no reason to extend a Proof.
            raise TypeError("Proof cannot be subclassed: only the core's rules make proofs")
        return super().__new__(mcs, name, bases, namespace, **kwargs)

    def __setattr__(cls, key, value):
        raise AttributeError("the Proof class is sealed: its accessors read the core's registry")

    def __delattr__(cls, key):
        raise AttributeError("the Proof class is sealed: its accessors read the core's registry")


class Proof(metaclass=_Sealed):
    """``hyps |- goal``, resting on ``axioms``.  Made only by the rules of this module.

    The object is a handle: its fields are read from the core's registry of issued proofs
    (:data:`_ISSUED`), which the rules also read directly.  A copy, a forged object, or one
    whose attributes were written from outside is not in the registry, or reads the same
    facts as before.  (What Python cannot stop is code that rewrites the core's private
    state itself; the core defends every use of its public objects.)"""

    __slots__ = ("__weakref__",)

    def __init__(self, *_args, **_kwargs):
        raise TypeError("Proof objects are made only by the rules of specbound.proofs.core")

    def __init_subclass__(cls, **kwargs):
        raise TypeError("Proof cannot be subclassed: only the core's rules make proofs")

    def __setattr__(self, key, value):
        raise AttributeError("a Proof is immutable")

    name = property(lambda self: _facts(self).name)
    hyps = property(lambda self: _facts(self).hyps)
    goal = property(lambda self: _facts(self).goal)
    axioms = property(lambda self: _facts(self).axioms)
    cited = property(lambda self: _facts(self).cited)
    kind = property(lambda self: _facts(self).kind)
    seconds = property(lambda self: _facts(self).seconds)
    rlimit = property(lambda self: _facts(self).rlimit)

    @property
    def formula(self) -> z3.BoolRef:
        """The sequent as one formula: ``And(hyps) => goal``."""
        facts = _facts(self)
        if not facts.hyps:
            return facts.goal
        return z3.Implies(z3.And(*facts.hyps.values()), facts.goal)

    @property
    def assumptions(self) -> frozenset:
        """Labels of the hypotheses."""
        return frozenset(_facts(self).hyps)

    def __repr__(self):
        facts = _lookup(self)
        if facts is None:
            return "Proof(<not issued by the core>)"
        return f"Proof({facts.name}: {len(facts.hyps)} hypotheses |- {facts.goal})"


# Every Proof made here, by identity: id -> (weak reference to it, its facts).  Looked up by
# ``id`` and confirmed with ``is``, so no ``__eq__``/``__hash__`` of any object takes part.
_ISSUED: dict[int, tuple] = {}


def _lookup(obj) -> _Facts | None:
    if type(obj) is not Proof:  # exactly Proof: no subclass exists, and no look-alike counts
        return None
    entry = _ISSUED.get(id(obj))
    return entry[1] if entry is not None and entry[0]() is obj else None


def _facts(proof) -> _Facts:
    facts = _lookup(proof)
    if facts is None:
        raise TypeError(f"{proof!r} is not a Proof made by the core")
    return facts


def facts(proof) -> _Facts:
    """What ``proof`` says (name, hyps, goal, axioms, cited, kind, seconds, rlimit), read from
    the core's registry.  Readers that judge proofs (the theorem runners) use this rather than
    the object's attributes: a Proof's class could be patched by code that bypasses its
    sealing, the registry cannot be reached that way."""
    return _facts(proof)


def is_proof(obj) -> bool:
    """Whether ``obj`` is a Proof made by this module (itself, not a copy or a look-alike)."""
    return _lookup(obj) is not None


def _forget(key):
    def callback(ref):
        entry = _ISSUED.get(key)
        if entry is not None and entry[0] is ref:  # a later proof may already hold this id
            del _ISSUED[key]
    return callback


def _issue(name, hyps, goal, axioms, cited, kind, seconds, rlimit) -> Proof:
    proof = object.__new__(Proof)
    key = id(proof)
    _ISSUED[key] = (weakref.ref(proof, _forget(key)),
                    _Facts(name, MappingProxyType(dict(hyps)), goal, MappingProxyType(dict(axioms)),
                           tuple(cited), kind, seconds, rlimit))
    return proof


# --- argument checks (those of formulas and limits alone: core_arguments) -----------------------

def _proofs(by, what: str = "by") -> list:
    if isinstance(by, Proof):
        by = [by]
    out = list(by)
    for p in out:
        if not is_proof(p):
            raise TypeError(f"{what}: {p!r} is not a Proof made by the core")
    return [_facts(p) for p in out]  # the rules read the registry's facts, never the object


def _merge(maps, what: str) -> dict:
    """Union of label -> value maps; one label naming two different formulas is an error."""
    out = {}
    for m in maps:
        for key, value in m.items():
            prev = out.get(key)
            if prev is None:
                out[key] = value
            elif not _same(prev, value):
                raise RuleError(f"{what} {key!r} names two different formulas")
    return out


def _same(a, b) -> bool:
    if isinstance(a, Axiom):
        return isinstance(b, Axiom) and a.formula.eq(b.formula)
    return a.eq(b)


def _sequent_formulas(facts: _Facts) -> list:
    return [facts.goal, *facts.hyps.values(), *(ax.formula for ax in facts.axioms.values())]


def _refuse_eigenvariables(name: str, eigen, formulas, where: str):
    """Refuse formulas that contain one of the rule's fresh constants."""
    for c in eigen:
        for formula in formulas:
            if occurs(c, formula):
                raise RuleError(f"{name}: {where} mentions {c}, a fresh constant of the rule: "
                                "it must not occur there")


def _solve(hyps: dict, lemmas: list, extra: Sequence, rlimit: int, seed: int, goal=None):
    """:func:`.core_query.query` on checked arguments; a supplied formula that names one of the
    query's tracking literals is refused (see there)."""
    extra = [closed_formula(formula, "extra constraint") for formula in extra]
    answer = query(hyps, lemmas, extra, rlimit, seed, goal)
    if answer[-1]:
        raise RuleError("a formula mentions one of the core's tracking literals: the core's own "
                        "constants cannot be named by a caller")
    return answer[:-1]


# --- the rules -----------------------------------------------------------------------------------

def axiom(name: str, formula, reason: str) -> Proof:
    """``|- formula``, assumed: a definition (``P(0) = 0``) or a launch contract
    (``grid = cdiv(bs, BLOCK_B)``).  Every proof that uses it lists it under ``axioms``."""
    if not isinstance(name, str) or not name:
        raise TypeError("axiom: name must be a non-empty str")
    if not isinstance(reason, str) or not reason.strip():
        raise TypeError(f"axiom {name}: give the reason it may be assumed")
    formula = closed_formula(formula, f"axiom {name}")
    return _issue(name, {}, formula, {name: Axiom(name, formula, reason)}, (), "axiom", 0.0, 0)


def assume(label: str, formula) -> Proof:
    """``{label: formula} |- formula``: a hypothesis as a fact, e.g. to instantiate a
    quantified precondition at a term (the instance keeps the hypothesis)."""
    hyps = hyp_map({label: formula}, "assume")
    return _issue(label, hyps, hyps[label], {}, (), "assumption", 0.0, 0)


def check(name: str, goal, *, hyps: Mapping[str, z3.BoolRef] | None = None, by: Sequence[Proof] = (),
          rlimit: int = DEFAULT_RLIMIT, seed: int = 0) -> Proof:
    """Prove ``goal`` from ``hyps`` and the lemmas ``by``; raise Refuted/Unknown otherwise.
    The Proof's hypotheses are those of ``hyps`` the unsat core needed (directly, or to
    discharge a cited lemma's hypotheses)."""
    goal = closed_formula(goal, f"{name}: goal")
    hyps = hyp_map(hyps)
    lemmas = _proofs(by)
    check_limits(rlimit, seed)
    result, solver, tags, goal_tag, seconds, used, open_hyps, literals = _solve(hyps, lemmas, (), rlimit, seed, goal)
    if result == z3.sat:
        note = "".join(f"; cited {lemma} holds only under {', '.join(labels)}, not hypotheses of this check"
                       for lemma, labels in open_hyps)
        raise Refuted(name, model_without(solver, literals), seconds, used, note)
    if result != z3.unsat:
        raise Unknown(name, solver.reason_unknown(), seconds, used)
    core_ids = {c.get_id() for c in solver.unsat_core()}
    if goal_tag is not None and goal_tag.get_id() not in core_ids:
        # The hypotheses and lemmas alone are contradictory: such a "proof" would be vacuous.
        raise Unknown(name, "hypotheses are inconsistent (goal not in unsat core)", seconds, used)
    used_hyps, axioms, cited = {}, [], []
    for tag_id in sorted(core_ids):
        entry = tags.get(tag_id)
        if entry is None:
            continue
        if entry[0] == "hyp":
            used_hyps[entry[1]] = hyps[entry[1]]
            continue
        lemma, discharged = entry[1], entry[2]
        used_hyps.update((label, hyps[label]) for label in discharged)
        axioms.append(lemma.axioms)
        cited += list(lemma.cited) + ([lemma.name] if lemma.kind == "lemma" else [])
    return _issue(name, used_hyps, goal, _merge(axioms, "axiom"), sorted(set(cited)), "lemma", seconds, used)


def instantiate(proof: Proof, *terms) -> Proof:
    """From ``H |- forall vs. body`` derive ``H |- body[vs := terms]``."""
    proof = _proofs([proof], "instantiate")[0]
    formula = proof.goal
    if not (z3.is_quantifier(formula) and formula.is_forall()):
        raise RuleError(f"instantiate: {proof.name} does not conclude a universally quantified formula")
    if formula.num_vars() != len(terms):
        raise RuleError(f"instantiate: {proof.name} binds {formula.num_vars()} variables, got {len(terms)} terms")
    values = []
    for i, term in enumerate(terms):
        value = z3.IntVal(term) if isinstance(term, int) and not isinstance(term, bool) else term
        if not z3.is_expr(value) or not in_main(value) or value.sort() != formula.var_sort(i):
            raise TypeError(f"instantiate: term {i} of {proof.name} must be a main-context term of sort "
                            f"{formula.var_sort(i)}, got {term!r}")
        if loose_variable(value) is not None:
            raise TypeError(f"instantiate: term {i} of {proof.name} has a variable no quantifier binds "
                            f"({value}): it would be captured by a binder of the body")
        values.append(value)
    # De Bruijn indices count from the innermost binder, hence the reversal.
    body = z3.substitute_vars(formula.body(), *reversed(values))
    return _issue(proof.name, proof.hyps, body, proof.axioms, proof.cited, proof.kind, 0.0, 0)


def generalise(proof: Proof, *consts, name: str | None = None) -> Proof:
    """From ``H |- phi`` derive ``H |- forall consts. phi``; each constant must be free in no
    hypothesis of ``H`` and in no axiom the proof rests on."""
    proof = _proofs([proof], "generalise")[0]
    if not consts:
        raise RuleError("generalise: name at least one constant")
    for c in consts:
        if not (z3.is_const(c) and c.decl().kind() == z3.Z3_OP_UNINTERPRETED and in_main(c)):
            raise TypeError(f"generalise: {c!r} is not an uninterpreted constant")
    if len({c.get_id() for c in consts}) != len(consts):
        raise RuleError("generalise: a constant is named twice")
    for c in consts:
        for label, formula in proof.hyps.items():
            if occurs(c, formula):
                raise RuleError(f"{proof.name}: cannot generalise {c}: it is free in hypothesis {label!r}")
        for ax in proof.axioms.values():
            if occurs(c, ax.formula):
                raise RuleError(f"{proof.name}: cannot generalise {c}: it is free in axiom {ax.name!r}")
    return _issue(name or proof.name, proof.hyps, z3.ForAll(list(consts), proof.goal), proof.axioms,
                  proof.cited, proof.kind, proof.seconds, proof.rlimit)


def check_forall(name: str, body, arity: int, *, by: Sequence[Proof] = (), by_at=None,
                 rlimit: int = DEFAULT_RLIMIT, seed: int = 0) -> Proof:
    """Prove ``forall x1..xn. body(x1..xn)`` without hypotheses: :func:`check` at fresh
    constants (``by_at(*xs)`` may add lemma instances at them), then :func:`generalise`."""
    xs = [z3.FreshInt("x") for _ in range(arity)]
    lemmas = [by] if isinstance(by, Proof) else list(by)
    at = list(by_at(*xs)) if by_at else []
    for lemma in _proofs(lemmas):
        # ``by`` was given before the eigenvariables existed: if it names one, it does so by
        # guessing a fresh name, and is refused (instances at them belong in ``by_at``).
        _refuse_eigenvariables(name, xs, _sequent_formulas(lemma), f"cited lemma {lemma.name!r}")
    _proofs(at, "by_at")
    inner = check(name, closed_formula(body(*xs), f"{name}: body"), by=[*lemmas, *at], rlimit=rlimit, seed=seed)
    return generalise(inner, *xs)


INDEX_NONNEG, INDUCTION_HYPOTHESIS = "induction_index_nonneg", "induction_hypothesis"


def induct(name: str, phi, *, arity: int = 0, base_hyps=None, step_hyps=None,
           base_by=None, step_by=None, rlimit: int = DEFAULT_RLIMIT, seed: int = 0) -> Proof:
    """Integer induction on the first argument of ``phi(v, *params)``: proves ``phi(0, ps)``
    and ``k >= 0 /\\ phi(k, ps) => phi(k + 1, ps)`` by :func:`check` for fresh ``k`` and
    parameters ``ps``, then concludes ``forall v, ps. v >= 0 => phi(v, ps)`` under the
    hypotheses both checks used.  ``base_hyps(*ps)`` / ``step_hyps(k, *ps)`` supply
    hypotheses, ``base_by(*ps)`` / ``step_by(k, *ps)`` lemma instances; no hypothesis the
    checks use may mention ``k`` or ``ps`` (a per-index fact enters as an instance of a
    quantified hypothesis or axiom: see :func:`assume`, :func:`instantiate`)."""
    v, k = z3.FreshInt("v"), z3.FreshInt("k")
    ps = [z3.FreshInt("p") for _ in range(arity)]
    shape = closed_formula(phi(v, *ps), f"{name}: phi")
    # phi reaches k only by naming it (FreshInt's names are predictable): its step would then
    # be proved at the one index k while the conclusion speaks of every index.
    _refuse_eigenvariables(name, [k], [shape], "phi")
    base_h = hyp_map(base_hyps(*ps) if base_hyps else {}, f"{name}: base_hyps")
    step_h = hyp_map(step_hyps(k, *ps) if step_hyps else {}, f"{name}: step_hyps")
    for label in (INDEX_NONNEG, INDUCTION_HYPOTHESIS):
        if label in step_h:
            raise RuleError(f"{name}: the label {label!r} is the core's own")
    step_h[INDEX_NONNEG] = k >= 0
    step_h[INDUCTION_HYPOTHESIS] = z3.substitute(shape, (v, k))
    base = check(f"{name}/base", z3.substitute(shape, (v, z3.IntVal(0))), hyps=base_h,
                 by=list(base_by(*ps)) if base_by else [], rlimit=rlimit, seed=seed)
    step = check(f"{name}/step", z3.substitute(shape, (v, k + 1)), hyps=step_h,
                 by=list(step_by(k, *ps)) if step_by else [], rlimit=rlimit, seed=seed)
    base, step = _facts(base), _facts(step)
    rest = {label: f for label, f in step.hyps.items() if label not in (INDEX_NONNEG, INDUCTION_HYPOTHESIS)}
    hyps = _merge([base.hyps, rest], f"{name}: hypothesis")
    axioms = _merge([base.axioms, step.axioms], "axiom")
    for c in [k, v, *ps]:
        for label, formula in hyps.items():
            if occurs(c, formula):
                raise RuleError(f"{name}: cannot generalise {c}: it is free in hypothesis {label!r} "
                                "(a per-index fact must be a quantified hypothesis or an axiom, instantiated by the core)")
        for ax in axioms.values():
            if occurs(c, ax.formula):
                raise RuleError(f"{name}: cannot generalise {c}: it is free in axiom {ax.name!r}")
    conclusion = z3.ForAll([v, *ps], z3.Implies(v >= 0, shape))
    return _issue(name, hyps, conclusion, axioms, sorted(set(base.cited) | set(step.cited)), "lemma",
                  base.seconds + step.seconds, base.rlimit + step.rlimit)


# --- model search (untrusted: never makes a Proof) ------------------------------------------------

@dataclass
class Model:
    """A satisfying assignment (a witness or a counterexample) with solver figures."""

    model: z3.ModelRef
    seconds: float
    rlimit: int


def satisfy(name: str, constraints: Mapping[str, z3.BoolRef], *, by: Sequence[Proof] = (),
            extra: Sequence[z3.BoolRef] = (), rlimit: int = DEFAULT_RLIMIT, seed: int = 0,
            narrow=None, narrow_rlimit: int | None = None) -> Model | None:
    """A model of ``constraints`` (quantified ones are not sent, as in :func:`check`), the
    lemmas ``by`` (hypotheses discharged the same way) and ``extra`` shaping constraints.
    Returns None when unsat; raises Unknown when Z3 gives no verdict.

    ``narrow(last)``, when given, is called with the model found and returns one more
    formula, or None to stop: the same solver is asked again with that formula added for
    this ask only (at most ``narrow_rlimit``, default ``rlimit``), and ``narrow`` is called
    again with the new model, or with None when the ask was unsat.  An ask answered unknown
    ends the asking.  The last model found is returned.  (A search, never a Proof: the
    solver is this call's own and goes when it returns.)"""
    check_limits(rlimit, seed)
    if narrow_rlimit is not None:
        check_limits(narrow_rlimit, seed)
    result, solver, _tags, _goal, seconds, used, _open, literals = _solve(
        hyp_map(constraints, "constraints"), _proofs(by), list(extra), rlimit, seed)
    if result == z3.unsat:
        return None
    if result != z3.sat:
        raise Unknown(name, solver.reason_unknown(), seconds, used)
    found = last = Model(model_without(solver, literals), seconds, used)
    while narrow is not None:
        more = narrow(last)
        if more is None:
            break
        result, model, seconds, used, named = ask_again(
            solver, closed_formula(more, f"{name}: a narrowing formula"), literals, narrow_rlimit or rlimit)
        if named:
            raise RuleError("a formula mentions one of the core's tracking literals: the core's own "
                            "constants cannot be named by a caller")
        if result == z3.sat:
            found = last = Model(model, seconds, used)
        elif result == z3.unsat:
            last = None
        else:
            break
    return found
