"""The kernel theorems' last line of defence: every proof evaluated on the closed witness.

A kernel theorem's closed witness (:mod:`.closure`) is one concrete launch: a batch, tensor
contents and launch inputs on which every precondition, launch contract and definition holds
at every index.  Each obligation's Proof says ``hyps, axioms |- goal`` for every
interpretation of its symbols, so on the witness, with every remaining symbol given a value
(the witness model's, as the closure gives the ones it checked), either a premise is false
there or the goal is true.  A goal that evaluates to False under premises that all hold means
the trusted core issued a false proof: the theorem is reported ``unsound`` and the run fails.

The facts are read from the core (``core.facts``), never from the obligation.  A premise or
goal that does not reduce to a truth value is decided as the closure decides its formulas
(:func:`specbound.proofs.witness.violation`: a quantified premise by the core at every index);
a goal that still has no truth value is counted as undecided, and the theorem does not pass.
A proof whose premises do not all hold on this witness (another lane, another access) is
counted, not claimed as checked.

Untrusted (it never makes a Proof).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import z3

from specbound.proofs import core, witness

@dataclass
class Evaluation:
    """What the proofs of one theorem came to on its closed witness."""

    checked: int = 0                              # premises hold, goal True
    off_witness: int = 0                          # a premise is false on this witness
    false: list = field(default_factory=list)     # [(obligation id, goal as evaluated)]: the core is unsound
    undecided: list = field(default_factory=list)  # [(obligation id, what has no truth value)]


class _Completed:
    """The closure's interpretation, plus a value for every symbol it leaves open (program
    ids, lanes and functions of obligations other than the witnessed one): the witness
    model's, as :class:`.witness.Interpretation` reads it."""

    def __init__(self, closed, formulas):
        interp, model = closed.interp, closed.model
        have_consts = {const.decl().name() for const, _ in interp.consts}
        have_funcs = {decl.name() for decl, _ in interp.funcs or ()}
        consts, funcs = witness.symbols(formulas)
        self.interp = interp
        self.consts = [(decl(), model.eval(decl(), model_completion=True))
                       for name, decl in consts.items() if name not in have_consts]
        self.funcs = [(decl, witness.table(model, decl)) for name, decl in funcs.items() if name not in have_funcs]

    def close(self, formula):
        out = self.interp.close(formula)
        if self.consts:
            out = z3.substitute(out, *self.consts)
        return z3.substitute_funs(out, *self.funcs) if self.funcs else out


def _holds(name: str, closed_formula) -> bool | None:
    """The truth value of a closed formula: by simplification, else as the closure decides a
    formula (a quantified one by the core at every index); None when neither says."""
    value = z3.simplify(closed_formula)
    if z3.is_true(value) or z3.is_false(value):
        return z3.is_true(value)
    if any(witness.symbols([closed_formula])):
        return None   # a symbol left open: no truth value
    broken, _where = witness.violation(name, closed_formula)
    return not broken


def evaluate(name: str, closed, outcomes) -> Evaluation:
    """Every proof among ``outcomes`` (proved and dead obligations) evaluated on ``closed``."""
    proofs = [(o.obligation.id, core.facts(o.proof)) for o in outcomes if o.proof is not None]
    formulas = [f for _, said in proofs for f in (*said.hyps.values(), said.goal,
                                                  *(ax.formula for ax in said.axioms.values()))]
    completed = _Completed(closed, formulas)
    out = Evaluation()
    for ob_id, said in proofs:
        premises = {**said.hyps, **{f"axiom {n}": ax.formula for n, ax in said.axioms.items()}}
        values = {label: _holds(f"{name}/{ob_id}/{label}", completed.close(f)) for label, f in premises.items()}
        if any(v is False for v in values.values()):
            out.off_witness += 1
            continue
        goal = z3.simplify(completed.close(said.goal))
        open_premises = [label for label, v in values.items() if v is None]
        if open_premises:
            out.undecided.append((ob_id, f"premises {', '.join(open_premises)}"))
        elif z3.is_false(goal):
            out.false.append((ob_id, _short(said.goal)))
        elif not z3.is_true(goal):
            out.undecided.append((ob_id, f"goal {_short(goal)}"))
        else:
            out.checked += 1
    return out


def _short(formula, limit: int = 160) -> str:
    return " ".join(str(formula).split())[:limit]
