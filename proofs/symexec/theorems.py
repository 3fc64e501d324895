"""Kernel theorems: obligations grouped per kernel and specialization, with witnesses and
mutants refuted by replayed counterexamples, as :class:`~specbound.proofs.theorem.TheoremResult`
so they join the same JSON report as the spec theorems.

Ids: ``KERNEL-<KERNEL>-<PROPERTY>[<constexprs>]``, e.g.
``KERNEL-BUILD-TREE-FULL-IN-BOUNDS[NODES=8,DEPTH=3,BLOCK_B=2]`` or
``KERNEL-KV-RACE-FREE[BLOCK_B=2,PAIRS=8,...]``.
"""

from __future__ import annotations

import time
from typing import Callable

from specbound.proofs import core
from specbound.proofs.theorem import MutantResult, TheoremResult, axioms_of

from . import mutants as kernel_mutants
from . import on_witness, verifiers
from .closure import theorem_witness
from .obligations import check
from .concretise import concretise

FAMILY = "kernel symexec"


class KernelTheoremResult(TheoremResult):
    """A kernel theorem is ok when every obligation is proved and witnessed (or proved dead: an
    access no lane ever activates in this specialization, such as the parent_list loads when
    D = 1), at least one is witnessed, and every mutant attached to it is refuted by a replay.  Mutants are about the kernel source, so they run
    on the first specialization of each kernel name (each tree layout its own); a theorem of
    another specialization (or a property without a source mutant) carries none."""

    @property
    def ok(self) -> bool:
        w = self.witness or {}
        return (self.status == "proved" and w.get("witnessed", 0) > 0
                and w.get("witnessed", 0) + w.get("dead", 0) == w.get("obligations")
                and all(m.status == "refuted" for m in self.mutants))

PROPERTIES = {
    "IN-BOUNDS": ({"bounds", "assert", "divzero", "loopstep"},
                  "every active lane of every load and store is inside its tensor (sizes from the spec's "
                  "allocation functions), every device_assert holds and no divisor is zero, for all runtime "
                  "inputs allowed by the preconditions"),
    "NO-WRAP": ({"wrap", "cast"},
                "no int32/int64 value wraps where it is observed (comparisons, division, casts, offsets, "
                "stored values, loop bounds)"),
    "NO-TRUNCATION": ({"truncation"},
                      "every mask base + arange(N) < x has x <= N (or the loop/grid bound): no copy is cut short"),
    "RACE-FREE": ({"region", "race"},
                  "each store lands in its own request's region, and two programs never store the same cell"),
    "FOOTPRINT": ({"footprint", "coverage"},
                  "the stored cells are exactly the spec's footprint: every active lane of every store writes the "
                  "spec cell of the indices it denotes (and, for kv_indptr and retrive_index, the spec value), and "
                  "every spec cell of the batch is stored by some active lane of some program"),
    "INDEX-IN-RANGE": ({"value"},
                       "every stored index lies in the rows its consumer indexes with it (never a negative index, "
                       "which torch indexing reads as a row counted from the end)"),
    "WALK-BOUNDED": ({"value"},
                     "every stored position is seq_len + depth with depth <= walk_max_steps(D), for any "
                     "(even malformed) tree"),
}


def kernel_name(theorem_id: str) -> str:
    """``KERNEL-BUILD-TREE-FULL-IN-BOUNDS[...]`` -> ``KERNEL-BUILD-TREE-FULL``."""
    name = theorem_id.split("[", 1)[0]
    for prop in PROPERTIES:
        if name.endswith("-" + prop):
            return name[: -len(prop) - 1]
    return name


# (kind, property) pairs whose first specialization carries no mutant, and why (each kernel
# module's ``without_mutant``): every other property of every kernel refutes at least one by replay.
WITHOUT_MUTANT = {(v.kind, prop): reason for v in verifiers.VERIFIERS for prop, reason in v.without_mutant.items()}

# Mutants only the FOOTPRINT obligations see: bounds, regions and races stay proved on them.
FOOTPRINT_ONLY = {kind: tuple(m.id for m in kernel_mutants.of_kind(kind) if m.prop == "FOOTPRINT")
                  for kind in verifiers.BY_KIND}


# --- specializations --------------------------------------------------------------------------------

def default_specs():
    """The representative subset run by ``pytest proofs`` and ``specbound prove --kernels``."""
    return {v.kind: list(v.default_specs) for v in verifiers.VERIFIERS}


def all_specs():
    """Every covered specialization (``--all`` / ``pytest --specbound-all``: the lane-bound grid and
    the serving envelope's ``plan.proof_selection``), each kernel's
    default subset first: mutants run on the first specialization of each kernel, which must
    exercise the faults (e.g. K > 1 for the #27338 width mutant; PAIRS = 1 forces K = 1)."""
    out = {}
    for v in verifiers.VERIFIERS:
        first = list(v.default_specs)
        out[v.kind] = first + [sp for sp in v.all_specs() if sp not in first]
    return out


def selected_specs(full: bool = False):
    """Every covered specialization when ``full``, else the default subset."""
    return all_specs() if full else default_specs()


def obligations(run, prop: str, *, bounds=None, executor=None, races=None, values=None, footprints=None) -> list:
    """The obligations of one property.  Bounds, executor, region and race obligations default
    to :class:`.models.Run`'s; the stored-value (``values``) and footprint maps are the
    kernel's own, required for the properties that need them (:func:`kernel_obligations`
    passes our kernels' modules').  A third-party kernel's model passes its own parts
    (``races`` then gives the region and race obligations)."""
    kinds = PROPERTIES[prop][0]
    obs = []
    if "bounds" in kinds:
        obs += bounds(run) if bounds else run.bounds_obligations()
    obs += executor(run, kinds) if executor else run.executor_obligations(kinds)
    if races is not None:
        obs += races(run) if "region" in kinds else []
    else:
        if "region" in kinds:
            obs += run.region_obligations()
        if "race" in kinds:
            obs += run.race_obligations()
    for kind, maps in (("value", values), ("footprint", footprints)):
        if kind in kinds:
            if maps is None:
                raise ValueError(f"{run.name} {prop}: the kernel's {kind} obligations were not given")
            obs += maps(run)
    return obs


def kernel_obligations(verifier, run, prop: str) -> list:
    """The obligations of one property of one of our kernels (its module's walk bound and
    footprint maps)."""
    return obligations(run, prop, values=verifier.values, footprints=verifier.footprint)


def refute(kind: str, sp, mutant: kernel_mutants.KernelMutant) -> MutantResult:
    """Run the mutated kernel/host symbolically; the first counterexample of the property is
    concretised and replayed; refuted only when the replay reproduces the fault."""

    start = time.perf_counter()
    verifier = verifiers.get(kind)
    limits = verifier.limits
    sp_m = mutant.spec_override(sp) if mutant.spec_override else sp
    host = dict(mutant.host)
    run = verifier.run(sp_m, transform=mutant.transform, host=host)
    notes = []
    for ob in kernel_obligations(verifier, run, mutant.prop):
        out = check(ob, run.functions, witness=False)
        if out.status != "counterexample":
            continue
        conc = concretise(run, ob, {**limits, **mutant.limits}, batch_cap=limits.get("num_seqs", limits.get("bs"))[1],
                          content_box=mutant.content_box)
        if conc is None:
            notes.append(f"{ob.id}: counterexample found but none inside the small box")
            continue
        rep = verifier.replay(sp_m, conc, mutant.plant, host)
        cex = {k: v for k, v in conc.items() if not k.startswith("_")}
        cex.update({f"replay.{k}": v for k, v in rep.inputs.items() if isinstance(v, (int, str))})
        if rep.verdict in mutant.expect:
            cex["obligation"] = ob.id
            cex["replay"] = rep.verdict
            return MutantResult(mutant.id, mutant.description, "refuted", cex, time.perf_counter() - start,
                                f"line {ob.line}: {ob.note}; replay: {rep.detail[:300]}")
        notes.append(f"{ob.id}: replay gave {rep.verdict} ({rep.detail[:120]})")
    return MutantResult(mutant.id, mutant.description, "survived", {}, time.perf_counter() - start,
                        "; ".join(notes) or "no counterexample: the obligations do not see this fault")


def runs_on(mutant: kernel_mutants.KernelMutant, sp) -> bool:
    """Whether ``mutant`` belongs to the theorems of ``sp``'s kernel name (a layout of the tree
    build is a kernel of its own: its mask code is its own)."""
    return sp.name in (mutant.layouts or (all_specs()[mutant.kind][0].name,))


def first_carrier(mutant: kernel_mutants.KernelMutant):
    """The specialization whose theorem carries ``mutant`` (the first of its kernel name)."""
    return next(sp for sp in all_specs()[mutant.kind] if runs_on(mutant, sp))


def carries_mutants(kind: str, sp, specs=None, count: int | None = None) -> bool:
    """Whether ``sp`` is among the first ``count`` specializations of its kernel name in
    ``specs`` (every covered one by default; each kernel's default subset comes first, so
    these are the same in the default run and in ``--all``)."""
    count = MUTANT_SPECS if count is None else count
    same = [s for s in (specs or all_specs())[kind] if s.name == sp.name]
    return sp in same[:count]


def prove_kernel(kind: str, sp, *, mutants: bool = True) -> list:
    """All property theorems of one kernel specialization; with ``mutants``, the mutants of
    its kernel name are refuted too."""
    verifier = verifiers.get(kind)
    muts = [m for m in kernel_mutants.of_kind(kind) if runs_on(m, sp)]
    results = []
    run = verifier.run(sp)
    for prop in verifier.properties:
        start = time.perf_counter()
        outcomes = [check(ob, run.functions) for ob in kernel_obligations(verifier, run, prop)]
        seconds = time.perf_counter() - start  # the proof alone; mutants report their own time
        mres, note = [], ""
        if mutants:
            for m in muts:
                if m.prop == prop:
                    mres.append(refute(kind, sp, m))
            if not mres and (kind, prop) in WITHOUT_MUTANT:
                note = f"no mutant: {WITHOUT_MUTANT[kind, prop]}"
        results.append(theorem_result(run, prop, outcomes, seconds, mres, note=note))
    return results


def theorem_result(run, prop: str, outcomes: list, seconds: float, mutants: list,
                   statement: str | None = None, note: str = "") -> KernelTheoremResult:
    """The theorem ``KERNEL-<run.name>-<prop>[<label>]`` from its obligations' outcomes;
    ``note`` is the detail of a proved theorem (e.g. why it has no mutant)."""
    failed = [o for o in outcomes if not o.ok]
    status = "proved" if outcomes and not failed else \
        ("unknown" if any(o.status in ("unknown",) for o in failed) else "failed")
    detail = "; ".join(f"{o.obligation.id} (line {o.obligation.line}): {o.status} {o.detail}".strip()
                       for o in failed[:6])
    if not outcomes:
        status, detail = "failed", "no obligations: nothing to prove"
    detail = detail or note
    said = [core.facts(o.proof) for o in outcomes if o.proof]  # read from the core, not the objects
    hyps_used = sorted({h for facts in said for h in facts.hyps})
    # every obligation's terms rest on the executor's closed form of each loop-carried
    # variable, which the core proved inductive (flow.py): those proofs are cited too
    cited = sorted({c for facts in said for c in facts.cited}
                   | {p.name for p in run.result.invariant_proofs})
    axioms = {name: ax for o in outcomes if o.proof for name, ax in axioms_of(o.proof).items()}
    witness = {}
    if status == "proved":
        # the witness shown is the closed one (closure.py): no closed model, no witness
        closed, why = theorem_witness(run, outcomes)
        if closed is None:
            status, detail = "failed", f"vacuous: no closed witness ({why})"
        else:
            witness = dict(closed.values)
            status, detail, seen = _last_line(run, closed, outcomes, status, detail)
            # counted, not claimed: a proof whose premises fail on this witness was not checked here
            witness["checked_on_witness"], witness["premises_off_witness"] = seen.checked, seen.off_witness
    witness["obligations"] = len(outcomes)
    witness["witnessed"] = sum(o.witness is not None for o in outcomes)
    witness["dead"] = sum(o.status == "dead" for o in outcomes)  # accesses no lane ever activates
    tid = f"KERNEL-{run.name}-{prop}[{run.label}]"
    statement = f"{statement or PROPERTIES[prop][1]} (obligations by line: " + ", ".join(
        f"{o.obligation.kind}@{o.obligation.line}" for o in outcomes[:40]) + (", ..." if len(outcomes) > 40 else "") + ")"
    res = KernelTheoremResult(
        id=tid, statement=statement, family=FAMILY, status=status, seconds=seconds,
        rlimit=sum(o.rlimit for o in outcomes), rlimit_limit=0, hypotheses_used=hyps_used,
        lemmas_cited=cited, preconditions=sorted(run.hyps) + sorted(run.contract), witness=witness,
        mutants=mutants, detail=detail, axioms_used=axioms)
    res.outcomes = outcomes
    return res


def _last_line(run, closed, outcomes, status: str, detail: str) -> tuple:
    """Every proof evaluated on the closed witness (:mod:`.on_witness`): a goal False there
    under premises that hold means the core is unsound; one with no truth value fails the
    theorem.  ``(status, detail, the on_witness.Evaluation)``."""
    seen = on_witness.evaluate(f"{run.name}[{run.label}]", run, closed, outcomes)
    if seen.false:
        return "unsound", ("UNSOUND: the trusted core issued a false proof: on the closed witness (every precondition "
                           f"holds at every index) " + "; ".join(f"{ob} proves {goal}, which is False there"
                                                                 for ob, goal in seen.false[:4])), seen
    if seen.undecided:
        return "failed", ("the last line of defence could not evaluate proofs on the closed witness: "
                          + "; ".join(f"{ob}: {what} has no truth value" for ob, what in seen.undecided[:4])), seen
    return status, detail, seen


# Mutants are about the kernel source, not a specialization: they run on this many of the
# first specializations of each kernel name (each tree layout its own; the manifest's
# expectations and the tests read it here).
MUTANT_SPECS = 1


def theorem_ids(full: bool = True) -> dict:
    """Every kernel theorem id of the selected specializations (all covered ones by default)
    -> ``(kind, index of its specialization, specialization)``, read from the registry without
    proving anything."""
    out = {}
    for kind, specs in selected_specs(full).items():
        for i, sp in enumerate(specs):
            for prop in verifiers.get(kind).properties:
                out[f"KERNEL-{sp.name}-{prop}[{sp.label}]"] = (kind, i, sp)
    return out


def plan(full: bool = False, kinds=None, only=None) -> list:
    """The specializations :func:`run_all` proves, in its order: ``(kind, index, spec)``
    (``full``, ``kinds`` and ``only`` as there)."""
    specs = all_specs() if only else selected_specs(full)
    kinds = tuple(verifiers.BY_KIND) if kinds is None else kinds
    todo = [(kind, i, sp) for kind in kinds for i, sp in enumerate(specs[kind])]
    if only:
        wanted = theorem_ids(full=True)
        places = {wanted[t][:2] for t in only if t in wanted}
        todo = [(kind, i, sp) for kind, i, sp in todo if (kind, i) in places]
    return todo


def prove_planned(kind: str, sp, full: bool = False, mutant_specs: int = MUTANT_SPECS, only=None) -> list:
    """The theorems of one specialization of :func:`plan`, with the mutants :func:`run_all`
    gives it: one step of ``run_all``."""
    specs = all_specs() if only else selected_specs(full)
    new = prove_kernel(kind, sp, mutants=carries_mutants(kind, sp, specs, mutant_specs))
    return [r for r in new if r.id in only] if only else new


def steps(full: bool = False, kinds=None, mutant_specs: int = MUTANT_SPECS, only=None):
    """:func:`plan`'s specializations proved in turn, each ``(results, seconds)`` as it is done."""
    for kind, _, sp in plan(full, kinds, only):
        start = time.perf_counter()
        results = prove_planned(kind, sp, full, mutant_specs, only)
        yield results, time.perf_counter() - start


def proved_steps() -> list:
    """Every step of the default run, ``[(results, seconds)]``: a parallel verify's worker task,
    handed back to ``run_all(proved=...)``.  The obligations' Z3 proofs stay in the worker: they
    do not pickle, and the report reads none of them."""
    done = list(steps())
    for results, _ in done:
        for r in results:
            r.__dict__.pop("outcomes", None)
    return done


def run_all(full: bool = False, kinds=None, mutant_specs: int = MUTANT_SPECS,
            progress: Callable | None = None, only=None, proved=None) -> list:
    """Every kernel theorem of the selected specializations; mutants on the first
    ``mutant_specs`` specializations of each kernel name (they are about the kernel source).
    ``progress(done, total, kind, spec, new_results, results_so_far, seconds)`` is called
    after each specialization (a full run takes minutes).  ``kinds``: the registered kernels
    (:data:`.verifiers.VERIFIERS`) by default.  ``only``: just these theorem ids (of any
    covered specialization; ``full`` is then moot), proved as the full run proves them.
    ``proved``: :func:`steps` of the same arguments run elsewhere (:func:`proved_steps` in a
    parallel verify's worker); by default they are run here."""
    out = []
    todo = plan(full, kinds, only)
    if proved is None:
        proved = steps(full, kinds, mutant_specs, only)
    for done, ((kind, _, sp), (new, seconds)) in enumerate(zip(todo, proved, strict=True), 1):
        out += new
        if progress is not None:
            progress(done, len(todo), kind, sp, new, out, seconds)
    return out
