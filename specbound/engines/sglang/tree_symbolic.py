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

Claimed here: IN-BOUNDS, NO-WRAP, RACE-FREE (every store and read-back in the program's own
request row, rows of different requests disjoint) and WALK-BOUNDED (``position <= D`` after
the walk: its invariant ``position <= k`` taken at the trip count ``k = D``).  Not FOOTPRINT:
its completeness half enumerates the n x n spec cells, each matched with an unconditional store
of the unrolled kernel; with symbolic loops it would need each spec cell shown stored by some
iteration (a quantified coverage obligation), which is not built.  So no launch is fully
proved by these theorems (envelope.coverage counts them in rows of their own).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import z3

from specbound import spec
from specbound.proofs import core
from specbound.proofs.model import labelled
from specbound.proofs.symexec.obligations import check, instantiate
from specbound.proofs.theorem import evaluate_report
from specbound.proofs.symexec.engine_theorems import prove as prove_run
from specbound.proofs.symexec.kernel_files import torch_free_module
from specbound.proofs.symexec.theorems import obligations as generic

from specbound.engines.sglang import tree_model

KERNEL, SOURCE = tree_model.KERNEL, tree_model.SOURCE
# What the symbolic proof claims for every specialization: all of tree_model's but FOOTPRINT.
PROPERTIES = tuple(p for p in tree_model.PROPERTIES if p != "FOOTPRINT")
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
    # footprints=None: FOOTPRINT is not claimed (generic refuses it); the race and walk maps
    # read the node loop's index as a term
    return generic(run, prop, bounds=_bounds, races=tree_model.race_obligations, values=tree_model.walk_obligations)


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
