"""What proving a serving engine's Triton kernel needs beyond one kernel's model: the
theorems of one specialization, and refutations whose counterexample is replayed on the
real kernel source (by the engine's adapter: ``specbound.engines.sglang.launch``,
``specbound.engines.vllm.replay``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import z3

from specbound.proofs.theorem import evaluate_report
from specbound.proofs import core
from specbound.proofs.terms import prove_rewritten

from .obligations import _witness, check, instantiate, Outcome
from .concretise import concretise
from .theorems import theorem_result


def prove(run, obligations: Callable, props, progress: Callable | None = None) -> list:
    """Every property theorem of one symbolic run (``obligations(run, prop)``)."""

    out = []
    shared = Shared()
    for prop in props:
        start = time.perf_counter()
        outcomes = check_all(obligations(run, prop), run.functions, shared)
        res = theorem_result(run, prop, outcomes, time.perf_counter() - start, [])
        out.append(res)
        if progress is not None:
            progress(res)
    return out


# --- many obligations of one unrolled kernel --------------------------------------------------

PATH_ONLY = ("if@", "not_returned@")   # branch conditions: what a path-free proof leaves out
QUICK_RLIMIT = 500_000


@dataclass
class Shared:
    """Proofs and witnesses shared between the obligations of one run."""

    proofs: dict = field(default_factory=dict)      # key -> (Proof of the goal under fewer hypotheses, rlimit)
    witnesses: list = field(default_factory=list)   # [(hypothesis keys, lemma ids, model)]


def _key(label, formula):
    return (label, formula.get_id() if hasattr(formula, "get_id") else repr(formula))


def check_all(obs, functions, shared: Shared | None = None) -> list:
    """``obligations.check`` for each obligation, with sound shortcuts that matter for an
    unrolled scalar kernel (hundreds of accesses whose offsets repeat under different branch
    conditions):

    * a goal is first tried without the branch conditions (dropping hypotheses is sound), one
      short attempt; the proof is shared by every obligation with the same goal and remaining
      hypotheses, and it is witnessed by a model of the hypotheses it was proved from (what
      makes a proof non-vacuous; such an access is not itself shown reachable, so a dead one
      is reported proved rather than ``dead``);
    * a witness of an obligation also witnesses any obligation whose hypotheses and lemmas
      are a subset of its own (the longest paths are searched first).

    Anything else is the ordinary ``check`` (portfolio, witness search, dead accesses)."""

    shared = shared or Shared()
    order = sorted(range(len(obs)), key=lambda i: -len(obs[i].hyps))
    outcomes: dict = {}
    base_inst: dict = {}
    for i in order:
        ob = obs[i]
        start = time.perf_counter()
        lemma_ids = {id(lm) for lm in ob.lemmas}
        base = {label: f for label, f in ob.hyps.items() if not label.startswith(PATH_ONLY)}
        bkey = (frozenset(_key(label, f) for label, f in base.items()), tuple(sorted(lemma_ids)))
        pkey = (ob.goal.get_id(), bkey)
        made_here = pkey not in shared.proofs
        if made_here:
            if bkey not in base_inst:
                base_inst[bkey] = instantiate(base, z3.BoolVal(True), functions, ob.lemmas)
            hyps, lemmas = base_inst[bkey]
            goal_hyps, goal_lemmas = instantiate({}, ob.goal, functions, [])
            hyps = {**hyps, **goal_hyps}
            lemmas = lemmas + [lm for lm in goal_lemmas if all(lm is not x for x in lemmas)]
            try:
                shared.proofs[pkey] = prove_rewritten(ob.id, ob.goal, hyps=hyps, by=lemmas, rlimit=QUICK_RLIMIT)
            except (core.Refuted, core.Unknown):
                pass
        proved = shared.proofs.get(pkey)
        if proved is not None:
            from dataclasses import replace
            found, reason, _h, _l = _witness(replace(ob, hyps=base), functions)
            if not reason and found is not None:
                outcomes[i] = Outcome(ob, "proved", time.perf_counter() - start, proved[0], None, found.model,
                                      "proved without its branch conditions", proved[1] if made_here else 0)
                continue
        keys = {_key(label, f) for label, f in ob.hyps.items()}
        witness = next((m for hk, lk, m in shared.witnesses if keys <= hk and lemma_ids <= lk), None)
        out = check(ob, functions, witness=witness is None)
        if witness is not None and out.status == "proved":
            out.witness = witness
        if out.witness is not None:
            shared.witnesses.append((keys, lemma_ids, out.witness))
        outcomes[i] = out
    return [outcomes[i] for i in range(len(obs))]


@dataclass
class Refutation:
    """A property shown false: the obligation, the concrete counterexample and what the
    replay on the real kernel did (``verdict`` in the expected set), or why not."""

    status: str               # "refuted" | "survived"
    obligation: str = ""
    counterexample: dict = field(default_factory=dict)
    verdict: str = ""
    detail: str = ""
    seconds: float = 0.0


def refute(run, obligations: Callable, props, replay: Callable, limits: dict, batch_cap: int,
           expect=("oob",), only: Callable | None = None, content_box: dict | None = None) -> Refutation:
    """The first counterexample of ``props`` (obligations selected by ``only``) that, made
    concrete inside ``limits`` (tensor contents inside ``content_box``, see :func:`.concretise.concretise`)
    and replayed (``replay(conc) -> specbound.replay.Replay``), reproduces a fault in ``expect``.
    A counterexample the replay does not reproduce is reported in ``detail``, never as a
    refutation."""

    start = time.perf_counter()
    notes = []
    for prop in props:
        for ob in obligations(run, prop):
            if only is not None and not only(ob):
                continue
            out = check(ob, run.functions, witness=False)
            if out.status != "counterexample":
                continue
            conc = concretise(run, ob, limits, batch_cap=batch_cap, content_box=content_box)
            if conc is None:
                values = evaluate_report(out.model, run.report)
                notes.append(f"{ob.id}: solver counterexample " + ", ".join(f"{k}={v}" for k, v in values.items())
                             + " (none inside the replay box: not replayed)")
                continue
            rep = replay(conc)
            cex = {k: v for k, v in conc.items() if not k.startswith("_")}
            cex.update({f"replay.{k}": v for k, v in rep.inputs.items() if isinstance(v, (int, str, list))})
            if rep.verdict in expect:
                return Refutation("refuted", ob.id, cex, rep.verdict,
                                  f"line {ob.line}: {ob.note}; replay: {rep.detail[:300]}",
                                  time.perf_counter() - start)
            notes.append(f"{ob.id}: replay gave {rep.verdict} ({rep.detail[:160]})")
    return Refutation("survived", detail="; ".join(notes) or "no counterexample",
                      seconds=time.perf_counter() - start)
