"""The machinery every kernel's launch model uses: a model (one per kernel, in
:mod:`.verifiers`) states tensor sizes, contents, runtime scalars and host contracts, all
taken from the spec (allocation functions and named conditions) and the kernel's launch plan,
per constexpr specialization; it runs the executor on the kernel source (read by path:
neither torch nor triton is imported) and returns a :class:`Run`, which turns into
obligations here (bounds, executor, own-region and race).  :class:`KernelVerifier` is what a
kernel module declares.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

import z3

from specbound import spec
from specbound.proofs import core as proof_core
from specbound.proofs import lemmas as spec_lemmas
from specbound.proofs import model
from specbound.proofs.model import labelled
from specbound.proofs.terms import subterms

from .interp import ExecResult
from .kernel_files import torch_free_module
from .obligations import instantiate, Obligation
from .values import INT32, V, lane_range, lane_vars_in

def launch_plans():
    """:mod:`specbound.kernels.plan`, the launch plans the wrappers use (the plans import
    only ``spec``; see :func:`kernel_files.torch_free_module`)."""
    return torch_free_module("plan")


# --- BLOCK_B symbolic: one proof for every power of two a block chooser can pick ---------------------
# A spec whose BLOCK_B is None stands for every value of plan.symbolic_block_b_values (its label
# says BLOCK_B=2^0..2^k): tl.arange(0, BLOCK_B) is a lane 0 <= lane < BLOCK_B in the executor.

def block_b(sp):
    """BLOCK_B of ``sp``: its int, or the Z3 constant of a symbolic one (made on first use: a
    constant made at import would shift the ids of every later term, hence Z3's unsat cores)."""
    return sp.BLOCK_B if sp.BLOCK_B is not None else z3.Int("BLOCK_B")


def block_b_label(sp):
    """BLOCK_B as ``sp``'s label names it: the int, or ``2^0..2^k``."""
    return sp.BLOCK_B if sp.BLOCK_B is not None else launch_plans().symbolic_block_b_label()


def state_block_b(sp, hyps: dict, constexprs: dict) -> dict:
    """The kernel's constexprs for ``sp``: a symbolic BLOCK_B is passed as its Z3 term, with the
    values the proof covers stated as a precondition (into ``hyps``, named in the label)."""
    if sp.BLOCK_B is None:
        values = launch_plans().symbolic_block_b_values()
        block = block_b(sp)
        hyps[f"BLOCK_B in {{{','.join(map(str, values[:3]))},...,{values[-1]}}}"] = z3.Or(*[block == v for v in values])
        constexprs = {**constexprs, "BLOCK_B": int32_scalar("BLOCK_B", block)}
    return constexprs


def block_b_report(sp) -> dict:
    """A symbolic BLOCK_B among the run's report terms (so a counterexample names its value)."""
    return {"BLOCK_B": block_b(sp)} if sp.BLOCK_B is None else {}


def concrete_block_b(sp, conc: dict) -> int:
    """BLOCK_B a replay launches: ``sp``'s, or the counterexample's value of a symbolic one."""
    return sp.BLOCK_B if sp.BLOCK_B is not None else conc["BLOCK_B"]


def block_b_inputs(sp, conc: dict) -> dict:
    """A replay's input naming the BLOCK_B it launched, when the spec left it symbolic."""
    return {"BLOCK_B": conc["BLOCK_B"]} if sp.BLOCK_B is None else {}


def covers(sp, other) -> bool:
    """Whether the kernel ``other`` (a concrete specialization, the same spec class) stands for
    is one ``sp``'s proof covers: ``other`` itself, or (BLOCK_B symbolic) the same other
    constexprs with a BLOCK_B among the symbolic values."""
    if other.BLOCK_B is None:
        return False
    if sp.BLOCK_B is not None:
        return sp == other
    return replace(other, BLOCK_B=None) == sp and other.BLOCK_B in launch_plans().symbolic_block_b_values()


def int32_scalar(name, term=None):
    return V(term if term is not None else z3.Int(name), (), INT32)


def int32_args(scalars: dict) -> dict:
    hyps = {}
    for name, v in scalars.items():
        hyps.update(labelled(spec.int32_arg_ok(v.e, name)))
    return hyps


@dataclass
class Region:
    """Where a store's lanes belong: request ``owner`` of the program, row ``key``;
    ``lo(r, k) <= cell < hi(r, k)`` and ``row_lo(k) <= cell < row_hi(k)``."""

    owner: Callable    # access -> Z3 Int (request index; -1 for program 0's extra cells)
    key: Callable      # access -> Z3 Int (row; 0 when the tensor has one)
    lo: Callable
    hi: Callable
    row_lo: Callable
    row_hi: Callable
    ordering_lemmas: Callable  # (rA, rB, k) -> [Proof]: hi(rA, k) <= lo(rB, k) when rA < rB
    row_lemmas: Callable       # (kA, kB) -> [Proof]: row_hi(kA) <= row_lo(kB) when kA < kB
    min_owner: int = 0         # -1 where program 0 also stores cells before request 0's
    key_ok: Callable = lambda k: z3.BoolVal(True)


@dataclass
class Run:
    name: str
    label: str
    result: ExecResult
    hyps: dict
    functions: dict
    tensors: dict
    regions: dict
    program_lo: Any   # owner range of program pid: [program_lo, program_hi)
    program_hi: Any
    report: dict      # name -> term, for concretising counterexamples
    lemmas: list = field(default_factory=list)
    axioms: list = field(default_factory=list)  # the launch contracts (core axioms), also among lemmas
    spec: Any = None                            # the specialization this run is of
    contract: tuple = ()                        # launch-model facts listed with the preconditions

    def __post_init__(self):
        # quantified hypotheses the run itself introduced (the caller's contents of a tensor
        # the program reads back are values of its dtype: memory.py)
        self.hyps.update(self.result.content_hyps)

    def base_hyps(self, path, shape, active=None) -> dict:
        h = dict(self.hyps)
        for label, cond in path:
            h[label] = cond
        h.update(lane_range(shape))
        if active is not None and not (z3.is_true(z3.simplify(active))):
            h["active_lanes"] = active
        return h

    def executor_obligations(self, kinds) -> list:
        out = []
        for i, ob in enumerate(self.result.obligations):
            if ob.kind not in kinds:
                continue
            active = ob.active if ob.active is not True else None
            out.append(Obligation(f"{ob.kind}@{ob.line}#{i}", ob.kind, ob.line, ob.note,
                                  self.base_hyps(ob.path, ob.shape, active), ob.goal, list(self.lemmas)))
        return out

    def bounds_obligations(self) -> list:
        """Per access: the lower and the upper bound as two obligations, and each of them per
        case of the scalar-only conditions inside the offset (e.g. the kv extension's
        ``page_size == 1 or K == 1``).  Every part is a smaller query than the conjunction;
        a case the preconditions exclude is dropped only after ``core.check`` proves it
        impossible."""
        out = []
        for i, a in enumerate(self.result.accesses):
            off = a.off.e
            base = self.base_hyps(a.path, a.shape, a.mask)
            cases = self._scalar_cases(off)
            for part, goal in (("lo", off >= 0), ("hi", off < a.tensor.numel)):
                for label, case in cases:
                    hyps = dict(base)
                    if case is not None:
                        hyps[f"case:{label}"] = case
                    out.append(Obligation(f"{a.kind}-{a.tensor.name}@{a.line}#{i}/{part}{label}", "bounds", a.line,
                                          f"every active lane of this {a.kind} is inside {a.tensor.name} "
                                          f"({'offset >= 0' if part == 'lo' else 'offset < numel'}{label})",
                                          hyps, goal, list(self.lemmas), replay=("oob", a.tensor.name)))
        return out

    def _scalar_cases(self, e, limit: int = 2, program_ids: bool = False) -> list:
        """[(label, condition)] covering every input: the case split on the conditions of the
        ``If`` nodes in ``e`` that mention only runtime scalars (no lane, program id, loop
        index or tensor content; with ``program_ids`` also program ids and loop indices);
        ``[("", None)]`` when there is none."""
        conds, seen, todo = [], set(), [e]
        locals_ = set() if program_ids else {c.get_id() for c in self.result.local_consts}
        while todo:
            x = todo.pop()
            if not z3.is_expr(x) or x.get_id() in seen:
                continue
            seen.add(x.get_id())
            if z3.is_app(x) and x.decl().kind() == z3.Z3_OP_ITE:
                c = x.arg(0)
                if not lane_vars_in(c) and not _has_app_or_local(c, locals_) and not z3.is_true(c) \
                        and not z3.is_false(c) and all(not c.eq(d) for d in conds):
                    conds.append(c)
            if z3.is_app(x):
                todo.extend(x.children())
        cases = [("", None)]
        for k, c in enumerate(conds[:limit]):
            nxt = []
            for label, prev in cases:
                for tag, cc in ((f"c{k}", c), (f"!c{k}", z3.Not(c))):
                    full = cc if prev is None else z3.And(prev, cc)
                    try:   # drop a case only when the preconditions provably exclude it
                        proof_core.check(f"case-excluded{label}[{tag}]", z3.Not(full), hyps=self.hyps, by=self.axioms,
                                 rlimit=500_000)
                        continue
                    except (proof_core.Refuted, proof_core.Unknown):
                        pass
                    nxt.append((f"{label}[{tag}]", full))
            cases = nxt
        if len(conds) > limit:
            pass  # further conditions stay inside the parts (still proved, just not split)
        return cases

    def stores(self):
        return [a for a in self.result.accesses if a.kind == "store"]

    def region_obligations(self) -> list:
        out = []
        for i, a in enumerate(self.result.accesses):
            if a.kind != "store":
                continue
            reg = self.regions[a.tensor.name]
            r, k, cell = reg.owner(a), reg.key(a), a.off.e
            parts = {
                "owner-in-program": z3.And(self.program_lo <= r, r < self.program_hi, reg.min_owner <= r),
                "row": z3.And(reg.key_ok(k), reg.row_lo(k) <= cell, cell < reg.row_hi(k)),
                "region-start": reg.lo(r, k) <= cell,
                "region-end": cell < reg.hi(r, k),
            }
            for part, goal in parts.items():
                out.append(Obligation(f"own-region-{a.tensor.name}@{a.line}#{i}/{part}", "region", a.line,
                                      f"every active lane stores inside its own request's region of "
                                      f"{a.tensor.name} ({part})",
                                      self.base_hyps(a.path, a.shape, a.mask), goal, list(self.lemmas)))
        return out

    def race_obligations(self) -> list:
        """Two programs pA < pB: a cell of A's region never equals one of B's.  The facts
        about each side are the own-region conclusions (proved per store first)."""
        out = []
        stores = [(i, a) for i, a in enumerate(self.result.accesses) if a.kind == "store"]
        grid = self.result.grid[0]
        seen = set()
        for ia, a in stores:
            if a.tensor.name in seen:
                continue
            seen.add(a.tensor.name)
            lines = sorted({x.line for _, x in stores if x.tensor.name == a.tensor.name})
            reg = self.regions[a.tensor.name]
            pa, pb, ra, rb, ka, kb, ca, cb = z3.Ints("pA pB rA rB kA kB cellA cellB")
            lo = lambda p: z3.If(p == 0, z3.IntVal(-1), p * self._block()) if self._has_extra() else p * self._block()
            hi = lambda p: p * self._block() + self._block()
            hyps = dict(self.hyps)
            hyps["programs_ordered"] = pa < pb
            hyps["programs_in_grid"] = z3.And(0 <= pa, pb < grid)
            for side, p, r, k, c in (("A", pa, ra, ka, ca), ("B", pb, rb, kb, cb)):
                hyps[f"own_region_{side}"] = z3.And(lo(p) <= r, r < hi(p), reg.min_owner <= r, reg.key_ok(k),
                                                    reg.lo(r, k) <= c, c < reg.hi(r, k),
                                                    reg.row_lo(k) <= c, c < reg.row_hi(k))
                hyps[f"owner_in_batch_{side}"] = r < self.batch_size()
            lem = reg.ordering_lemmas(ra, rb, ka) + reg.row_lemmas(ka, kb) + reg.row_lemmas(kb, ka) + self.axioms
            out.append(Obligation(f"race-{a.tensor.name}", "race", a.line,
                                  f"programs pA < pB never store the same {a.tensor.name} cell "
                                  f"(any two of the stores at lines {lines}, each proved in its own "
                                  f"request's region first)", hyps, ca != cb, lem,
                                  witness_extra=[ra >= 0, rb >= 0]))
        return out

    def _block(self):
        return self.result.block

    def _has_extra(self):
        return self.result.extra_owner

    def batch_size(self):
        return self.result.batch


def _has_app_or_local(e, locals_) -> bool:
    """Whether ``e`` mentions an uninterpreted application (tensor contents, reductions) or a
    program-local constant (program id, loop index)."""
    return any(x.get_id() in locals_ or (z3.is_app(x) and x.decl().kind() == z3.Z3_OP_UNINTERPRETED
                                         and x.num_args() > 0) for x in subterms(e))


def prefix_schema(count, lemmas: bool = True):
    """Contents of the host's prefix tensor: ``prefix[i] = P(i)``, with the axioms defining P
    and (``lemmas``) the proved bound/monotonicity lemmas at ``i`` and ``i + 1``; a scalar
    kernel that reads many prefix cells cites the lemmas it needs itself."""
    def schema(app):
        i = app.arg(0)
        out = {"prefix_step": model.prefix_at(i), "prefix_zero": model.PREFIX_ZERO}
        if lemmas:
            out.update({"L-PREFIX-BOUND": proof_core.instantiate(spec_lemmas.prefix_bound(count), i),
                        "L-PREFIX-BOUND+1": proof_core.instantiate(spec_lemmas.prefix_bound(count), i + 1),
                        "L-PREFIX-MONOTONE+1": proof_core.instantiate(spec_lemmas.prefix_monotone(count), count, i + 1),
                        "L-PREFIX-MONOTONE": proof_core.instantiate(spec_lemmas.prefix_monotone(count), count, i)})
        return out
    return schema


def seq_len_schema(requests: dict):
    """Contents of seq_lens: the core's instances of the per-request preconditions
    ``requests`` (quantified hypotheses of the run) at each index read."""
    def schema(app):
        return {f"{proof.name}": proof for proof in model.instances(requests, app.arg(0))}
    return schema


def content_preconditions(functions, decl, name: str, holds, requests=None, **more) -> dict:
    """Preconditions on a tensor's contents, ``forall i. holds(i, decl(i))`` (and each of
    ``more``: name -> holds), as quantified hypotheses; each value read gets the core's
    instances (``decl``'s schema).  With ``requests`` (a batch size) the tensor has one entry
    per request and they are per-request preconditions (``model.per_request``)."""
    named = {name: holds, **more}
    if requests is None:
        hyps = {label: model.forall_index(lambda i, h=h: h(i, decl(i))) for label, h in named.items()}
    else:
        hyps = model.per_request(lambda i: {label: h(i, decl(i)) for label, h in named.items()}, size=requests)
    register_function(functions, decl, lambda app: {proof.name: proof for proof in model.instances(hyps, app.arg(0))})
    return hyps


def launch_contracts(**named) -> list:
    """Launch contracts: what the launch wrapper establishes by construction, as core axioms."""
    return [proof_core.axiom(name, formula, reason) for name, (formula, reason) in named.items()]


def check_plan(kernel: str, plan, scalars: dict, tensors: dict) -> None:
    """The wrapper's plan passes exactly the arguments this model gives the kernel; one it
    added or dropped would otherwise go unmodelled."""
    if set(plan.args) != set(scalars) | set(tensors):
        raise ValueError(f"{kernel}: the launch plan passes {sorted(plan.args)}, the model "
                         f"{sorted(set(scalars) | set(tensors))}: update the model with the plan")


def make_oracle(global_hyps: dict, functions: dict, axioms: list):
    """Side facts for term simplification, each proved by the trusted core under the run's
    hypotheses (a failed or unknown check just leaves the general term)."""

    def oracle(name, hyps, goal):
        h = dict(global_hyps)
        h.update(hyps)
        h, lem = instantiate(h, goal, functions, list(axioms))
        try:
            return proof_core.check(name, goal, hyps=h, by=lem, rlimit=200_000)
        except (proof_core.Refuted, proof_core.Unknown):
            return None
    return oracle


def register_function(functions, decl, schema):
    functions[decl.name()] = (decl, schema)


def mul_mono(x, y, z):
    return proof_core.instantiate(spec_lemmas.mul_le_mono(), x, y, z)


@dataclass(frozen=True)
class KernelVerifier:
    """Everything the verifier knows about one of our Triton kernels, declared by its module in
    :mod:`.verifiers` (``VERIFIER``) and registered there.  The theorem runner, the mutant
    registry, the manifest and the replays read only these fields."""

    kind: str                  # short name ("kv"): CLI, manifest and mutant registry key
    module: str                # specbound.kernels.<module> holds the kernel
    func: str                  # the @triton.jit function
    run: Callable              # (spec, *, transform=None, host=None) -> Run: the symbolic launch
    properties: tuple          # the properties proved (keys of theorems.PROPERTIES)
    default_specs: tuple       # the representative subset (its first carries the mutants)
    all_specs: Callable        # () -> [spec]: every covered one (incl. plan.proof_selection's, BLOCK_B symbolic)
    limits: dict               # report name -> (lo, hi): the box a counterexample is replayed in
    replay: Callable           # (spec, concrete counterexample, plant, host) -> replay.Replay
    footprint: Callable        # run -> [Obligation]: soundness and coverage of every store
    mutants: tuple = ()        # plant.KernelMutant, all of kind ``kind``
    values: Callable | None = None   # run -> [Obligation] for WALK-BOUNDED (stored values)
    without_mutant: dict = field(default_factory=dict)  # property -> why no mutant refutes it
