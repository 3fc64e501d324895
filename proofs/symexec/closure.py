"""Closed witnesses of kernel theorems.

An obligation's witness (:func:`.obligations._witness`) is a model of its hypotheses with
the quantified ones left out: only the schema instances at the applications the query
mentions are sent.  Such a model can break a per-request precondition at every request the
query did not look at (a raw witness of the kv kernel had ``num_seqs`` = 268,435,454 and
``pool_row`` -2 for every request), so preconditions that contradict each other at an index
no instance mentions would still be "witnessed".

A theorem's closed witness is one concrete launch on which every precondition, launch
contract and definition the theorem's proofs rest on holds at every index, and at least one
of its obligations is active.  It is searched in a small box first (a batch of at most
``cap`` requests, every integer constant and every tensor value read in ``[-box, box]``),
with every quantified hypothesis and every content schema instantiated at each index of
that batch, so the model is small enough to close; it is then closed with
:func:`specbound.proofs.witness.search` (``seq_len`` the finite batch and ``P``, ``Q`` its
prefix sums; tensor contents and the executor's own functions their tables in the model),
and every formula is decided on the closed interpretation, the quantified ones by Z3 at
every index.  A model that breaks one is searched again with that index instantiated.

Untrusted (it never makes a Proof); it only refuses to call a model a witness.
"""

from __future__ import annotations

from dataclasses import dataclass

import z3

from specbound.proofs import core, witness
from specbound.proofs.model import DEFINITIONS, batch_completion, batch_indices
from specbound.proofs.theorem import plain_values

from .obligations import instantiate, int_constants, witness_key

# (largest batch, bound on every integer the search may choose): small first, then larger
TIERS = ((4, 64), (8, 4096))
ATTEMPTS = ((2_000_000, 0), (10_000_000, 1))
CANDIDATES = 2      # obligations whose activation a theorem's closed witness is searched with

_CLOSED: dict = {}


def _index_instances(formulas, indices) -> list:
    """``body[i]`` of every one-variable integer ``forall`` among ``formulas``, at each of ``indices``."""
    out = []
    for f in formulas:
        if z3.is_quantifier(f) and f.is_forall() and f.num_vars() == 1 and f.var_sort(0) == z3.IntSort():
            out += [z3.substitute_vars(f.body(), z3.IntVal(i)) for i in indices]
    return out


def contents(run) -> list:
    """The per-index tensor contents of the run: one-argument integer functions the launch
    model declares (tensor contents, ``seq_len``, the prefix sums), not the executor's own."""
    out = []
    for t in run.tensors.values():
        for decl in (t.content, t.prefix[0] if t.prefix else None):
            if isinstance(decl, z3.FuncDeclRef) and decl.arity() == 1 and decl.range() == z3.IntSort():
                out.append(decl)
    for name in ("seq_len", "P", "Q"):
        if name in run.functions:
            out.append(run.functions[name][0])
    return list({d.name(): d for d in out}.values())


def _axioms(lemmas) -> dict:
    """Every axiom the lemmas rest on (launch contracts, definitions), by name."""
    out = {}
    for lemma in lemmas:
        out.update(core.facts(lemma).axioms)
    return out


def _finder(run, hyps: dict, lemmas: list, extra: list, cap: int, box: int):
    """``find(indices)`` for :func:`witness.search`: a model of the hypotheses in the box,
    every quantified hypothesis and content schema instantiated at ``0..cap`` and ``indices``."""
    decls = contents(run)
    batch = run.result.batch
    base_box = [z3.And(c >= -box, c <= box) for c in int_constants(hyps, lemmas, extra)]
    if z3.is_expr(batch):
        base_box.append(batch <= cap)
    small = {"P", "Q"}  # prefix sums grow with the batch: bounded through seq_len instead

    def find(indices):
        at = sorted(set(range(cap + 1)) | set(indices))
        more, facts = list(base_box), list(lemmas)
        more += _index_instances(hyps.values(), at)
        for decl in decls:
            schema = run.functions[decl.name()][1] if decl.name() in run.functions else None
            for i in at:
                app = decl(z3.IntVal(i))
                for fact in (schema(app) if schema else {}).values():
                    if isinstance(fact, core.Proof):
                        facts.append(fact)
                    elif z3.is_quantifier(fact):
                        continue
                    else:
                        more.append(fact)
                if decl.name() not in small:
                    more.append(z3.And(app >= -box, app <= box))
        for limit, seed in ATTEMPTS:
            try:
                return core.satisfy(f"{run.name}/closed-witness", hyps, by=facts, extra=[*extra, *more],
                                    rlimit=limit, seed=seed)
            except core.Unknown:
                continue
        return None
    return find


@dataclass(frozen=True)
class Closed:
    """A closed witness: the report's values on it, the interpretation they were read from
    (every formula was checked on it) and the obligation it activates."""

    values: dict
    interp: witness.Interpretation
    obligation: object
    model: object = None


def close(run, ob) -> tuple:
    """A closed witness of ``ob``'s hypotheses (activation included): ``(Closed, note)``,
    None and a note saying why when no model closes.  Cached per hypothesis set, like the
    raw witnesses."""
    key, pinned = witness_key(run.functions, ob)
    hit = _CLOSED.get(key)
    if hit is not None:
        return hit[1]
    hyps, lemmas = instantiate(ob.hyps, z3.BoolVal(True), run.functions, ob.lemmas)
    # the run's preconditions and launch contracts, whether or not this obligation cites them
    formulas = {**run.hyps, **hyps}
    axioms = _axioms([*lemmas, *run.axioms])
    # the definitions of P and Q hold by construction of the closed batch; checked anyway
    # when the formulas use them
    names = {d.name() for d in contents(run)}
    axioms.update({n: ax for n, ax in DEFINITIONS.items()
                   if ("P" if n.startswith("prefix") else "Q") in names})
    formulas.update({f"axiom {name}": ax.formula for name, ax in axioms.items()})
    shown = [t for t in run.report.values() if z3.is_expr(t)]
    note = ""
    result = (None, "")
    for cap, box in TIERS:
        find = _finder(run, hyps, lemmas, list(ob.witness_extra), cap, box)
        found, interp, note = witness.search(f"{run.name}/{ob.id}", find, formulas, batch_completion,
                                             batch_indices, shown=shown, rounds=3)
        if found is not None:
            result = (Closed(plain_values(run.report, interp.value), interp, ob, found.model), "")
            break
        result = (None, note or f"none with at most {cap} requests and values in [-{box}, {box}]")
    _CLOSED[key] = (pinned, result)
    return result


def theorem_witness(run, outcomes) -> tuple:
    """The closed witness of a theorem: that of the first of its witnessed obligations whose
    model closes (at most :data:`CANDIDATES` tried).  ``(Closed, note)``, None and why."""
    note = "no obligation is witnessed"
    for o in [o for o in outcomes if o.witness is not None][:CANDIDATES]:
        closed, why = close(run, o.obligation)
        if closed is not None:
            return closed, ""
        note = f"{o.obligation.id}: {why}"
    return None, note
