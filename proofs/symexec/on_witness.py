"""The kernel theorems' last line of defence: every proof evaluated on the closed witness.

A kernel theorem's closed witness (:mod:`.closure`) is one concrete launch: a batch, tensor
contents and launch inputs on which every precondition, launch contract and definition holds
at every index.  Each obligation's Proof says ``hyps, axioms |- goal`` for every
interpretation of its symbols, so on that launch, at any program and lanes (every remaining
symbol given a value), either a premise is false or the goal is true.  A goal that evaluates
to False under premises that all hold means the trusted core issued a false proof: the
theorem is reported ``unsound`` and the run fails.

Each proof is evaluated first at the program and lanes of the witness model; when a premise
fails there (another access, another lane), at a program of the same launch where its
premises hold: the launch stays the closure's, and the core only proposes the program-local
values (``core.satisfy``), which are then evaluated like the first.  The facts are read from
the core (``core.facts``), never from the obligation.  A premise or goal that does not reduce
to a truth value by simplification is decided as the closure decides its formulas
(:func:`specbound.proofs.witness.violation`: a quantified premise by the core at every
index); one that still has no truth value fails the theorem.  A proof whose premises hold at
no program found (an access this small launch never activates) is counted, not claimed as
checked.

Untrusted (it never makes a Proof).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import z3

from specbound.proofs import core, witness
from .closure import contents


@dataclass
class Evaluation:
    """What the proofs of one theorem came to on its closed witness."""

    checked: int = 0                              # premises hold, goal True
    elsewhere: list = field(default_factory=list)  # obligation ids among them checked at another program
    off_witness: int = 0                          # a premise is false on this witness
    false: list = field(default_factory=list)     # [(obligation id, goal as evaluated)]: the core is unsound
    undecided: list = field(default_factory=list)  # [(obligation id, what has no truth value)]


class _Point:
    """One concrete program of the witness launch: the closure's values for the launch (its
    inputs, tensor contents, the batch, fixed) and ``model``'s for the program-local symbols
    (program ids, lanes, loop indices, the executor's functions), read as
    :class:`.witness.Interpretation` reads a model."""

    def __init__(self, fixed, model, formulas):
        fixed_consts, fixed_funcs = fixed
        consts, funcs = witness.symbols(formulas)
        have_consts, have_funcs = _names(fixed_consts), _names(fixed_funcs)
        self.consts = fixed_consts + [(decl(), model.eval(decl(), model_completion=True))
                                      for name, decl in consts.items() if name not in have_consts]
        self.funcs = fixed_funcs + [(decl, witness.table(model, decl))
                                    for name, decl in funcs.items() if name not in have_funcs]

    def close(self, formula):
        return _substitute(formula, self.consts, self.funcs)


def _names(pairs) -> set:
    return {(term.decl() if z3.is_expr(term) else term).name() for term, _ in pairs}


def _substitute(formula, consts, funcs):
    out = z3.substitute(formula, *consts) if consts else formula
    return z3.substitute_funs(out, *funcs) if funcs else out


def _launch(run, closed) -> tuple:
    """The closure's values of the launch's own symbols: the constants of its preconditions,
    contracts and report (program ids and loop indices aside) and every function the closure
    interprets but the executor's own (reductions, definitions, witness lanes)."""
    formulas = [*run.hyps.values(), *(core.facts(a).goal for a in run.axioms),
                *(t for t in run.report.values() if z3.is_expr(t))]
    local = {c.decl().name() for c in [*_as_list(run.result.pid), *run.result.local_consts] if z3.is_expr(c)}
    launch = set(witness.symbols(formulas)[0]) - local
    executor = set(run.functions) - {d.name() for d in contents(run)}
    return ([(c, v) for c, v in closed.interp.consts if c.decl().name() in launch],
            [(d, t) for d, t in closed.interp.funcs if d.name() not in executor])


def _as_list(x) -> list:
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _holds(name: str, closed_formula, memo: dict) -> bool | None:
    """The truth value of a closed formula: by simplification, else as the closure decides a
    formula (a quantified one by the core at every index); None when neither says.  ``memo``:
    the values already decided (Z3 shares equal terms, so a precondition every proof rests
    on is decided once)."""
    value = _value(closed_formula)
    if value is not None:
        return value
    hit = memo.get(closed_formula.get_id())
    if hit is not None:
        return hit[1]
    if any(witness.symbols([closed_formula])):
        holds = None   # a symbol left open: no truth value
    else:
        holds = not witness.violation(name, closed_formula)[0]
    memo[closed_formula.get_id()] = (closed_formula, holds)   # the term pinned: its id stays its own
    return holds


def _value(formula) -> bool | None:
    value = z3.simplify(formula)
    return z3.is_true(value) if z3.is_true(value) or z3.is_false(value) else None


def _premises(said) -> dict:
    return {**said.hyps, **{f"axiom {n}": ax.formula for n, ax in said.axioms.items()}}


def _judge(out: Evaluation, name: str, ob_id: str, said, point: _Point, memo: dict) -> bool:
    """Record the proof's verdict at ``point``; False (nothing recorded) when a premise fails there."""
    values = {label: _holds(f"{name}/{ob_id}/{label}", point.close(f), memo) for label, f in _premises(said).items()}
    if any(v is False for v in values.values()):
        return False
    goal = point.close(said.goal)
    # a quantified goal is decided like a quantified premise; any other residue (a division by
    # zero Z3 leaves uninterpreted) has no truth value
    holds = _holds(f"{name}/{ob_id}/goal", goal, memo) if z3.is_quantifier(goal) else _value(goal)
    open_premises = [label for label, v in values.items() if v is None]
    if open_premises:
        out.undecided.append((ob_id, f"premises {', '.join(open_premises)}"))
    elif holds is False:
        out.false.append((ob_id, _short(said.goal)))
    elif holds is None:
        out.undecided.append((ob_id, f"goal {_short(z3.simplify(goal))}"))
    else:
        out.checked += 1
    return True


def _program(name: str, fixed, said):
    """A model of the proof's premises with the launch fixed (the program-local symbols
    free): a program and lanes of the witness launch at which the proof speaks, or None.
    The core only proposes the point; the verdict is the evaluation there."""
    consts, funcs = fixed
    premises = {label: _substitute(f, consts, funcs) for label, f in _premises(said).items()}
    try:
        found = core.satisfy(f"{name}/program", premises, rlimit=SEARCH_RLIMIT)
    except core.Unknown:
        return None
    return found.model if found is not None else None


SEARCH_RLIMIT = 2_000_000


def evaluate(name: str, run, closed, outcomes) -> Evaluation:
    """Every proof among ``outcomes`` (proved and dead obligations) evaluated on ``closed``:
    at the witness model's program and lanes, else at a program of the same launch where its
    premises hold (searched once per premise set)."""
    proofs = [(o.obligation.id, core.facts(o.proof)) for o in outcomes if o.proof is not None]
    fixed = _launch(run, closed)
    at_witness = _Point(fixed, closed.model, [f for _, said in proofs for f in (*_premises(said).values(), said.goal)])
    out = Evaluation()
    searched, memo = {}, {}
    for ob_id, said in proofs:
        if _judge(out, name, ob_id, said, at_witness, memo):
            continue
        key = tuple(sorted(f.get_id() for f in _premises(said).values()))
        if key not in searched:
            searched[key] = _program(f"{name}/{ob_id}", fixed, said)
        model = searched[key]
        point = None if model is None else _Point(fixed, model, [*_premises(said).values(), said.goal])
        if point is None or not _judge(out, name, ob_id, said, point, memo):
            out.off_witness += 1
        else:
            out.elsewhere.append(ob_id)
    return out


def _short(formula, limit: int = 160) -> str:
    return " ".join(str(formula).split())[:limit]
