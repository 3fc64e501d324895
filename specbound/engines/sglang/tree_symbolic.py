"""sglang's Triton tree build proved once per mask mode for every (K, D, n) of the serving
envelope: ``topk``, ``depth`` and ``draft_token_num`` (and the row strides derived from them)
are Z3 terms instead of one compiled kernel's constants.

Triton compiles one kernel per (K, D, n, mode, batch size); their code is the same but for
these constants, which the kernel uses only in arithmetic and as loop trip counts (never in a
block shape: the executor refuses a symbolic constexpr there).  Its loops
(``range(n - 1, 0, -1)``, ``range(n - 1)``, ``range(n)``, ``range(depth)``) run as symbolic
loops: one arbitrary iteration, the loop-carried variables (``parent_position``, ``found``,
``cur_position``, ``position``, ``should_continue``) summarised by interval invariants that
the trusted core proves inductive (:mod:`specbound.proofs.symexec.invariants`), and what the
reverse loop reads back of ``retrive_next_token`` taken as any int64 (earlier iterations'
stores are not replayed).  The envelope's ranges of K, D, n and ``spec.tree_shape_ok`` are
stated preconditions, the batch size is symbolic as in :mod:`.tree_model`.

Every property of :mod:`.tree_model` is claimed: IN-BOUNDS, NO-WRAP, RACE-FREE (every store
and read-back in the program's own request row, rows of different requests disjoint),
FOOTPRINT (every store's cell a spec cell of its own row, ``retrive_index`` its own cell as
the value; and every spec cell of ``tree_mask``, ``positions``, ``retrive_index`` stored for
every request: for an arbitrary cell, some store runs at loop indices chosen from the cell,
:func:`coverage_obligations`) and WALK-BOUNDED (``position <= D`` after the walk: its
invariant ``position <= k`` taken at the trip count ``k = D``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import z3

from specbound import spec
from specbound.proofs import core
from specbound.proofs.model import P, bs, labelled, seq_len
from specbound.proofs.terms import subterms
from specbound.proofs.symexec.obligations import Obligation, check, instantiate
from specbound.proofs.symexec.values import V
from specbound.proofs.theorem import evaluate_report
from specbound.proofs.symexec.engine_theorems import prove as prove_run
from specbound.proofs.symexec.kernel_files import torch_free_module
from specbound.proofs.symexec.theorems import obligations as generic

from specbound.engines.sglang import tree_model

KERNEL, SOURCE = tree_model.KERNEL, tree_model.SOURCE
# What the symbolic proof claims for every specialization: all of tree_model's.
PROPERTIES = tree_model.PROPERTIES
K, D, N = z3.Ints("topk depth draft_token_num")


def _envelope():
    return torch_free_module("plan").ENVELOPE


@dataclass(frozen=True)
class EnvelopeSpec:
    """Every (K, D, n) of the envelope with ``spec.tree_shape_ok`` at one mask mode, every batch
    size of the envelope (``bs`` symbolic)."""

    mode: int
    bs: None = None

    topk, depth, n = K, D, N

    @property
    def name(self):
        return f"SGLANG-TREE-{tree_model.MODE_NAMES[self.mode]}"

    @property
    def label(self):
        env = _envelope()
        k, d, n = env.topk, env.num_steps, env.num_draft_tokens
        return (f"K={k[0]}..{k[1]},D={d[0]}..{d[1]},n={n[0]}..{n[1]},mode={tree_model.MODE_NAMES[self.mode]},"
                f"batch_size=1..{tree_model.BATCH_MAX}")

    @property
    def pl_width(self):
        return spec.parent_list_width(K, D)

    @property
    def sel_width(self):
        return spec.selected_index_width(N)

    def hyps(self) -> dict:
        """The envelope's ranges of K, D, n and the tree shape (spec.tree_shape_ok)."""
        env = _envelope()
        out = {f"{name}_in_envelope": z3.And(lo <= t, t <= hi)
               for name, t, (lo, hi) in (("topk", K, env.topk), ("depth", D, env.num_steps),
                                          ("draft_token_num", N, env.num_draft_tokens))}
        out.update(labelled(spec.tree_shape_ok(K, D, N)))
        return out


def specs() -> list:
    return [EnvelopeSpec(mode) for mode in sorted(tree_model.MODE_NAMES)]


def obligations(run, prop: str) -> list:
    if prop not in PROPERTIES:
        raise ValueError(f"{prop}: the envelope proof claims only {PROPERTIES}")
    # the race and walk maps read the node loop's index as a term; FOOTPRINT's completeness is
    # over symbolic loops (coverage_obligations)
    return generic(run, prop, bounds=_bounds, races=tree_model.race_obligations, values=tree_model.walk_obligations,
                   footprints=footprint_obligations)


def _bounds(run) -> list:
    """The bounds obligations, less the cases of an access that its own hypotheses exclude
    (proved by the core, per-index preconditions instantiated at the access's reads): the
    row strides' empty-row case (``n = 1`` or ``D = 1``) where the access runs only for a
    non-empty row (a loop over the row's entries, a parent slot a well-formed tree names).
    An access keeps all its cases when every one is excluded (then it fails as vacuous)."""
    kept, by_access = [], {}
    for ob in run.bounds_obligations():
        case = next((f for label, f in ob.hyps.items() if label.startswith("case:")), None)
        by_access.setdefault(ob.id.split("/")[0], []).append(ob)
        if case is not None and _excluded(run, ob, case):
            continue
        kept.append(ob)
    live = {ob.id.split("/")[0] for ob in kept}
    return kept + [ob for access, obs in by_access.items() if access not in live for ob in obs]


def _excluded(run, ob, case) -> bool:
    rest = {label: f for label, f in ob.hyps.items() if not label.startswith("case:")}
    hyps, lemmas = instantiate(rest, case, run.functions, ob.lemmas)
    try:
        core.check(f"{ob.id}/case-excluded", z3.Not(case), hyps=hyps, by=lemmas, rlimit=2_000_000)
        return True
    except (core.Refuted, core.Unknown):
        return False


def prove(sp: EnvelopeSpec, path: str, host: tree_model.Host | None = None, progress=None) -> list:
    """The :data:`PROPERTIES` of sglang's tree kernel at ``path`` for every (K, D, n) of the
    envelope at ``sp.mode``."""
    return prove_run(tree_model.run_kernel(sp, path, host), obligations, PROPERTIES, progress)


# --- refuting ---------------------------------------------------------------------------------------

# The shapes a refutation searches first (a counterexample inside is one outside too): small
# enough that the concrete specialization's run and replay take seconds.
REPLAY_BOX = {"topk": 3, "depth": 3, "n": 6}


def refute(sp: EnvelopeSpec, path: str, props=PROPERTIES, replay: bool = True, attempts: int = 6):
    """The first obligation of ``props`` with a counterexample inside :data:`REPLAY_BOX`, as
    ``(obligation id, values of the report's terms, refutation)``.  With ``replay``, the
    counterexample's (K, D, n) is refuted as a concrete specialization whose counterexample is
    replayed on the kernel at ``path`` (:func:`.tree_model.refute_run`); a shape whose concrete
    refutation survives (the summarised loops over-approximate: e.g. a walk position reached
    only after more iterations than D allows) is excluded and the search goes on, ``attempts``
    shapes at most (the last refutation is returned, whatever its status).  ``None`` when no
    obligation has a counterexample."""
    run = tree_model.run_kernel(sp, path)
    box = {f"replay_box_{name}": t <= REPLAY_BOX[name] for name, t in (("topk", K), ("depth", D), ("n", N))}
    found = None
    for prop in props:
        for ob in obligations(run, prop):
            for _ in range(attempts):
                out = check(replace(ob, hyps={**ob.hyps, **box}), run.functions, witness=False)
                if out.status != "counterexample":
                    break
                values = evaluate_report(out.model, run.report)
                if not replay:
                    return ob.id, values, None
                shape = (values["topk"], values["depth"], values["n"])
                ref = tree_model.refute_run(tree_model.TreeSpec(*shape, sp.mode), path, props=(prop,))
                found = (ob.id, values, ref)
                if ref.status == "refuted":
                    return found
                box[f"replay_box_not_{shape}"] = z3.Not(z3.And(K == shape[0], D == shape[1], N == shape[2]))
    return found


# --- FOOTPRINT: completeness over symbolic loops ------------------------------------------------------

# Path entries that decide whether a statement runs (branches, loop iterations, the grid); the
# others (havocs, invariants) are facts about values and no part of a store's reachability.
RUNS = ("program_id", "loop_index@", "loop_iter@", "if@", "not_returned@")
LOOPS = ("loop_index@", "loop_iter@")


def _loop_indices(path) -> list:
    """The index constants of the loops a statement is inside (each loop's path entry is
    ``And(idx >= 0, ...)``)."""
    return [cond.arg(0).arg(0) for label, cond in path if label.startswith(LOOPS)]


def _solve(col, x):
    """``x`` as a term of the column ``col`` when ``col = c0 + c*x`` with ``c`` = +-1 (else
    None): ``x = c * (column - c0)``."""
    c0 = z3.simplify(z3.substitute(col, (x, z3.IntVal(0))))
    c = z3.simplify(z3.substitute(col, (x, z3.IntVal(1))) - c0)
    if not (z3.is_int_value(c) and c.as_long() in (1, -1)):
        return None
    if not z3.is_true(z3.simplify(col == c0 + c * x)):
        rest = z3.simplify(col - c0 - c * x)
        if not (z3.is_int_value(rest) and rest.as_long() == 0):
            return None
    return lambda column: c * (column - c0)


def _stored_at(run, a, t, j):
    """The condition that store ``a`` runs and writes spec cell (``t``, ``j``) of the program's
    request (``t`` None for a token tensor), its loop indices chosen from the cell: the node
    loop's index is ``t`` (mask rows), one more index is solved from the column; or None when
    the store cannot be matched so."""
    b = run.result.pid[0]
    loops = _loop_indices(a.path)
    sigma = []
    if t is not None:
        node = a.env.get("draft_tokenx")
        if not (isinstance(node, V) and any(node.e.eq(x) for x in loops)):
            return None
        sigma.append((node.e, t))
        cell = spec.mask_tree_cell(spec.TreeMaskMode(run.spec.mode), b, t, j, N, seq_len(b), P(b))
    else:
        cell = spec.token_cell(b, j, N)
    off = z3.substitute(a.off.e, *sigma) if sigma else a.off.e
    base = z3.substitute(cell, (j, z3.IntVal(0)))
    free = [x for x in loops if not any(x.eq(y) for y, _ in sigma) and _mentions(off, x)]
    if len(free) > 1:
        return None
    if free:
        solve = _solve(z3.simplify(off - base), free[0])
        if solve is None:
            return None
        sigma.append((free[0], solve(j)))
    runs = [c for label, c in a.path if label.startswith(RUNS)]
    goal = z3.And(*runs, a.mask, a.off.e == cell)
    return z3.substitute(goal, *sigma) if sigma else goal


def _mentions(e, x) -> bool:
    return any(s.eq(x) for s in subterms(e))


def coverage_obligations(run) -> list:
    """Every spec cell of the outputs written in full (``tree_model.EXACT``) is stored for every
    request: for an arbitrary cell (``t``, ``j``) some store runs with loop indices chosen from
    the cell (:func:`_stored_at`) and writes it.  One quantified obligation per tensor (a
    disjunction over its stores)."""
    b = run.result.pid[0]
    fb, t, j = z3.Ints("cell_b cell_t cell_j")
    out = []
    for name in tree_model.EXACT:
        row = t if name == "tree_mask" else None
        stores = [(i, a) for i, a in tree_model._stores(run) if a.tensor.name == name]
        options = [g for g in (_stored_at(run, a, row, j) for _i, a in stores) if g is not None]
        hyps = dict(run.hyps)
        hyps["spec_request"] = z3.And(0 <= fb, fb < bs)
        hyps["chosen_pid"] = b == fb
        hyps["spec_cell"] = z3.And(0 <= j, j < N, *([0 <= t, t < N] if row is not None else []))
        out.append(Obligation(f"coverage-{name}", "coverage", 0,
                              f"every spec cell of {name} is stored for every request (some store runs at "
                              "loop indices chosen from the cell)", hyps,
                              z3.Or(*options) if options else z3.BoolVal(False), list(run.lemmas)))
    return out


def footprint_obligations(run) -> list:
    return tree_model.footprint_soundness(run) + coverage_obligations(run)
