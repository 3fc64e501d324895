"""A counterexample made concrete: a Z3 model of ``hyps /\\ not goal`` re-solved inside a small
box so it reads as a real batch (plain ints, and per-request contents as functions of the
index).  Launching it is :mod:`specbound.replay`'s work; each kernel's verifier module turns
these values into its replay's arguments.
"""

from __future__ import annotations

import z3

from specbound.proofs import core as proof_core

from .obligations import instantiate


def _box(run, limits: dict) -> list:
    out = []
    for name, term in run.report.items():
        lim = limits.get(name)
        if lim is not None and z3.is_int(term):
            out.append(z3.And(term >= lim[0], term <= lim[1]))
    return out


CONTENT_BOX = (-4, 40)  # tensor contents in a replay, unless a mutant asks for more


def concretise(run, ob, limits: dict, batch_cap: int, content_box: dict | None = None) -> dict | None:
    """A small model of ``hyps /\\ not goal``: the report scalars within ``limits``, every
    per-request content schema instantiated for the first ``batch_cap`` indices, each content
    value in ``CONTENT_BOX`` (or ``content_box[function name]``)."""
    hyps, lemmas = instantiate(ob.hyps, ob.goal, run.functions, ob.lemmas)
    extra = _box(run, limits)
    for name, (decl, schema) in run.functions.items():
        if decl.arity() == 1 and decl.range() == z3.IntSort() and not name.startswith(("min@", "max@", "sum@")):
            for i in range(batch_cap + 1):
                app = decl(z3.IntVal(i))
                for label, fact in schema(app).items():
                    if isinstance(fact, proof_core.Proof):
                        lemmas.append(fact)  # its hypotheses are the run's, discharged by them
                    else:
                        extra.append(fact)
                lo, hi = (content_box or {}).get(name, CONTENT_BOX)
                extra.append(z3.And(app >= lo, app <= hi))
    constraints = dict(hyps)
    constraints["goal!negated"] = z3.Not(ob.goal)
    try:
        found = proof_core.satisfy(f"{ob.id}/concrete", constraints, by=lemmas, extra=extra, rlimit=20_000_000)
    except proof_core.Unknown:
        return None
    if found is None:
        return None
    m = found.model
    val = lambda t: m.eval(t, model_completion=True).as_long()
    out = {name: val(term) for name, term in run.report.items() if z3.is_int(term)}
    out["_contents"] = {}
    for name, (decl, _schema) in run.functions.items():
        if decl.arity() == 1 and decl.range() == z3.IntSort():
            out["_contents"][name] = lambda i, d=decl: m.eval(d(z3.IntVal(i)), model_completion=True).as_long()
    out["_model"] = m
    return out
