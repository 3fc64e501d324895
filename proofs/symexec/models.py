"""Launch models of our kernels: tensor sizes, contents, runtime scalars and host contracts,
all taken from the spec (allocation functions and named conditions), per constexpr
specialization.  A model runs the executor on the kernel source (read by path: neither
torch nor triton is imported) and turns the run into obligations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import z3

from specbound import spec
from specbound.proofs import lemmas as L
from specbound.proofs import kernel as K_
from specbound.proofs import model as M
from specbound.proofs.model import C, D, K, P, bs, labelled, num_seqs, page, seq_len, width
from specbound.proofs.model import n as N
from specbound.proofs.terms import subterms

from .interp import Executor, ExecResult
from .kernel_files import kernel_path, torch_free_module
from .obligations import Obligation
from .values import DTYPES, INT32, INT64, LANES, TensorModel, V, lane_range, lane_vars_in

INT32_LIMIT = spec.INT32_LIMIT


def launch_plans():
    """:mod:`specbound.kernels.plan`, the launch plans the wrappers use (the plans import
    only ``spec``; see :func:`kernel_files.torch_free_module`)."""
    return torch_free_module("plan")


def _scalar(name, term=None):
    return V(term if term is not None else z3.Int(name), (), INT32)


def _int32_args(scalars: dict) -> dict:
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

    def __post_init__(self):
        # quantified hypotheses the run itself introduced (the caller's contents of a tensor
        # the program reads back are values of its dtype: memory.py)
        self.hyps.update(getattr(self.result, "content_hyps", {}))

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
        a case the preconditions exclude is dropped only after ``kernel.check`` proves it
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
                        K_.check(f"case-excluded{label}[{tag}]", z3.Not(full), hyps=self.hyps, by=self.axioms,
                                 rlimit=500_000)
                        continue
                    except (K_.Refuted, K_.Unknown):
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
            if True:
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


def _prefix_schema(count, lemmas: bool = True):
    """Contents of the host's prefix tensor: ``prefix[i] = P(i)``, with the axioms defining P
    and (``lemmas``) the proved bound/monotonicity lemmas at ``i`` and ``i + 1``; a scalar
    kernel that reads many prefix cells cites the lemmas it needs itself."""
    def schema(app):
        i = app.arg(0)
        out = {"prefix_step": M.prefix_at(i), "prefix_zero": M.PREFIX_ZERO}
        if lemmas:
            out.update({"L-PREFIX-BOUND": K_.instantiate(L.prefix_bound(count), i),
                        "L-PREFIX-BOUND+1": K_.instantiate(L.prefix_bound(count), i + 1),
                        "L-PREFIX-MONOTONE+1": K_.instantiate(L.prefix_monotone(count), count, i + 1),
                        "L-PREFIX-MONOTONE": K_.instantiate(L.prefix_monotone(count), count, i)})
        return out
    return schema


def _seq_len_schema(requests: dict):
    """Contents of seq_lens: the core's instances of the per-request preconditions
    ``requests`` (quantified hypotheses of the run) at each index read."""
    def schema(app):
        return {f"{proof.name}": proof for proof in M.instances(requests, app.arg(0))}
    return schema


def _requests(count, *extra):
    """The per-request preconditions of a batch of ``count``: seq_len in [0, C] and ``extra``
    (each ``i -> {name: formula}``), as quantified hypotheses."""
    def conds(i):
        out = list(M.seq_len_conds(i))
        for more in extra:
            out += [spec.Condition(name, name, f) for name, f in more(i).items()]
        return tuple(out)
    return M.per_request(conds, count)


def _content(functions, decl, name: str, holds, **more) -> dict:
    """Preconditions on a tensor's contents, ``forall i. holds(i, decl(i))`` (and each of
    ``more``: name -> holds), as quantified hypotheses; each value read gets the core's
    instances (``decl``'s schema)."""
    hyps = {label: M.forall_index(lambda i, h=h: h(i, decl(i))) for label, h in {name: holds, **more}.items()}
    _register(functions, decl, lambda app: {proof.name: proof for proof in M.instances(hyps, app.arg(0))})
    return hyps


def _contracts(**named) -> list:
    """Launch contracts: what the launch wrapper establishes by construction, as core axioms."""
    return [K_.axiom(name, formula, reason) for name, (formula, reason) in named.items()]


def _check_plan(kernel: str, plan, scalars: dict, tensors: dict) -> None:
    """The wrapper's plan passes exactly the arguments this model gives the kernel; one it
    added or dropped would otherwise go unmodelled."""
    if set(plan.args) != set(scalars) | set(tensors):
        raise ValueError(f"{kernel}: the launch plan passes {sorted(plan.args)}, the model "
                         f"{sorted(set(scalars) | set(tensors))}: update the model with the plan")


def make_oracle(global_hyps: dict, functions: dict, axioms: list):
    """Side facts for term simplification, each proved by the trusted core under the run's
    hypotheses (a failed or unknown check just leaves the general term)."""
    from .obligations import instantiate

    def oracle(name, hyps, goal):
        h = dict(global_hyps)
        h.update(hyps)
        h, lem = instantiate(h, goal, functions, list(axioms))
        try:
            return K_.check(name, goal, hyps=h, by=lem, rlimit=200_000)
        except (K_.Refuted, K_.Unknown):
            return None
    return oracle


def _register(functions, decl, schema):
    functions[decl.name()] = (decl, schema)


def _mul_mono(x, y, z):
    return K_.instantiate(L.mul_le_mono(), x, y, z)


# --- draft kv ---------------------------------------------------------------------------

KV_EXTRA_NAMES = ("indptr_stride", "r2t_width", "pool_rows", "grid")


@dataclass(frozen=True)
class KvSpec:
    BLOCK_B: int
    PAIRS: int
    STEPS: int
    BLOCK_C: int
    indices_dtype: str = "int64"
    indptr_dtype: str = "int64"
    name = "KV"   # the kernel part of its theorem ids (KERNEL-<name>-<PROPERTY>[<label>])

    @property
    def label(self):
        return (f"BLOCK_B={self.BLOCK_B},PAIRS={self.PAIRS},STEPS={self.STEPS},BLOCK_C={self.BLOCK_C},"
                f"INDICES={self.indices_dtype},INDPTR={self.indptr_dtype}")


def kv_run(sp: KvSpec, *, transform=None, host: dict | None = None) -> Run:
    """Symbolic run of ``draft_kv_kernel``.  ``host`` overrides parts of the launch model
    (a mutant's host): ``width_hyp`` (replaces the capacity check), ``steps_lanes``,
    ``room`` (every request also has room for its draft tokens)."""
    host = host or {}
    indptr_stride, r2t_width, pool_rows, G = z3.Ints("indptr_stride r2t_width pool_rows grid")
    r2t_s0, r2t_s1 = z3.Ints("r2t_stride0 r2t_stride1")
    scalars = {"num_seqs": _scalar("num_seqs", num_seqs), "topk": _scalar("topk", K),
               "num_steps": _scalar("num_steps", D), "page_size": _scalar("page_size", page),
               "width": _scalar("width", width), "indptr_stride": _scalar("indptr_stride", indptr_stride),
               "r2t_stride0": _scalar("r2t_stride0", r2t_s0), "r2t_stride1": _scalar("r2t_stride1", r2t_s1)}
    functions: dict = {}
    pool_row = z3.Function("pool_row", z3.IntSort(), z3.IntSort())
    r2t = z3.Function("req_to_token", z3.IntSort(), z3.IntSort())
    r2t_dt = DTYPES["int32"] if sp.indices_dtype == "int32" else DTYPES[host.get("r2t_dtype", "int64")]
    per_request = [lambda i: {"req_to_token_row_covers_reads": spec.kv_req_to_token_span(seq_len(i), K, D, page)
                              <= r2t_width}]
    if host.get("room"):  # a mutant's host that also assumes room for the draft tokens
        per_request.append(lambda i: {"draft_room": seq_len(i) + D <= C})
    requests = _requests(num_seqs, *per_request)
    hyps = labelled(spec.kv_shape_ok(K, D, page))
    hyps.update(labelled(spec.context_ok(C)))
    hyps.update(requests)
    hyps.update(_content(functions, pool_row, "pool_row_in_req_to_token", lambda i, v: z3.Implies(
        z3.And(0 <= i, i < num_seqs), z3.And(0 <= v, v < pool_rows))))
    hyps.update(_content(functions, r2t, "req_to_token_value", lambda i, v: z3.And(v >= r2t_dt.lo(), v < r2t_dt.hi())))
    _register(functions, seq_len, _seq_len_schema(requests))
    _register(functions, P, _prefix_schema(num_seqs))
    tensors = {
        "req_pool_indices_ptr": TensorModel("req_pool_indices", num_seqs, INT64, pool_row),
        "req_to_token_ptr": TensorModel("req_to_token", pool_rows * r2t_width, r2t_dt, r2t),
        "seq_lens_ptr": TensorModel("seq_lens", num_seqs, INT64, seq_len),
        "prefix_ptr": TensorModel("prefix", num_seqs, INT64, P),
        "kv_indices_ptr": TensorModel("kv_indices", D * width, DTYPES[sp.indices_dtype], written=True),
        "kv_indptr_ptr": TensorModel("kv_indptr", D * indptr_stride, DTYPES[sp.indptr_dtype], written=True),
    }
    plan = launch_plans().kv_plan(tensors, num_seqs=num_seqs, topk=K, num_steps=D, page_size=page, width=width,
                                  indptr_stride=indptr_stride, r2t_stride0=r2t_s0, r2t_stride1=r2t_s1,
                                  block_b=sp.BLOCK_B, pairs=sp.PAIRS, steps=sp.STEPS, block_c=sp.BLOCK_C)
    _check_plan("draft_kv_kernel", plan, scalars, tensors)
    # no int32 grid contract: the kernels widen the program id (pid.to(tl.int64) * BLOCK)
    axioms = _contracts(
        batch_nonempty=(num_seqs >= 1, "the launch wrapper returns before launching an empty batch"),
        grid_is_cdiv=(G == plan.grid[0], f"the wrapper launches cdiv(num_seqs, {sp.BLOCK_B}) programs"),
        indptr_row_width=(indptr_stride >= spec.draft_branches(num_seqs, K) + 1,
                          "the wrapper allocates kv_indptr rows of num_seqs*K + 1 entries"),
        req_to_token_contiguous=(z3.And(r2t_s0 == r2t_width, r2t_s1 == 1, pool_rows >= 1),
                                 "the wrapper passes req_to_token's strides (a contiguous, non-empty 2-D tensor)"))
    if "width_hyp" in host:
        hyps["host_width"] = host["width_hyp"](num_seqs, K, C, D, width)
    else:
        hyps["draft_kv_capacity_ok"] = spec.draft_kv_capacity_ok(P(num_seqs), K, num_seqs, D, width)
    hyps.update(labelled(spec.lane_bound_ok(D * K, sp.PAIRS, "PAIRS")))
    steps_lanes = host.get("steps_lanes", lambda d, lanes: d <= lanes)
    hyps["lane_bound_STEPS"] = steps_lanes(D, sp.STEPS)
    if sp.indptr_dtype == "int32":
        hyps.update(labelled(spec.int32_alloc_ok(
            spec.draft_kv_indices_used_len(P(num_seqs), K, spec.draft_branches(num_seqs, K), D), "used_len")))
    hyps.update(_int32_args(scalars))
    hyps.update(labelled(spec.int32_arg_ok(C, "max_context_len")))
    ex = Executor(kernel_path("draft_kv"), "draft_kv_kernel", constexprs=dict(plan.constexprs),
                  scalars=scalars, tensors=tensors, grid=[G], transform=transform,
                  oracle=make_oracle(hyps, functions, axioms))
    res = ex.run()
    res.block, res.extra_owner, res.batch = sp.BLOCK_B, True, num_seqs
    functions.update(res.functions)

    def seg(r, k):  # spec.kv_segment_start of branch (r, 0) in row k - 1
        return (k - 1) * width + spec.kv_segment_start(P(r), r, 0, K, k, 0)

    def owner_b(a):
        return a.env["b"].e

    def key_it(a):
        return a.env["it2"].e

    def indptr_owner(a):
        return z3.IntVal(-1) if "z1" not in a.env else a.env["b"].e

    def indptr_key(a):
        return a.env["it2"].e if "z1" in a.env else LANES[0] + 1  # entry 0 of row i: key i + 1
    stores = [a for a in res.accesses if a.kind == "store" and a.tensor.name == "kv_indptr"]
    # The first kv_indptr store (entries z + 1) runs where z1 is bound; the entry-0 store too,
    # so tell them apart by their place in the source.
    entry0_line = max(a.line for a in stores) if stores else -1

    def indptr_owner2(a):
        return z3.IntVal(-1) if a.line == entry0_line else a.env["b"].e

    def indptr_key2(a):
        # entry 0 of row i: key i + 1 (i = arange(0, STEPS); a constant 0 when STEPS = 1)
        return a.env["i"].e + 1 if a.line == entry0_line else a.env["it2"].e

    regions = {
        "kv_indices": Region(
            owner_b, key_it, lambda r, k: seg(r, k), lambda r, k: seg(r + 1, k),
            lambda k: (k - 1) * width, lambda k: k * width,
            lambda ra, rb, k: [K_.instantiate(L.prefix_monotone(num_seqs), rb, ra + 1),
                               _mul_mono(P(ra + 1), P(rb), K), _mul_mono(ra + 1, rb, k * K)],
            lambda ka, kb: [_mul_mono(ka, kb - 1, width)], 0, lambda k: z3.And(1 <= k, k <= D)),
        "kv_indptr": Region(
            indptr_owner2, indptr_key2,
            lambda r, k: (k - 1) * indptr_stride + r * K + 1, lambda r, k: (k - 1) * indptr_stride + (r + 1) * K + 1,
            lambda k: (k - 1) * indptr_stride, lambda k: k * indptr_stride,
            lambda ra, rb, k: [_mul_mono(ra + 1, rb, K)],
            lambda ka, kb: [_mul_mono(ka, kb - 1, indptr_stride)], -1, lambda k: z3.And(1 <= k, k <= D)),
    }
    pid = res.pid[0]
    run_lemmas = list(res.side_proofs)
    b_terms = {a.env["b"].e.get_id(): a.env["b"].e for a in res.accesses if "b" in a.env and a.kind == "store"}
    for b in b_terms.values():
        # the request's req_to_token row ends inside the pool: (row + 1)*width <= rows*width
        run_lemmas += kv_lemmas(b, LANES[1]) + [_mul_mono(pool_row(b) + 1, pool_rows, r2t_width)]
    report = {"num_seqs": num_seqs, "topk": K, "num_steps": D, "page_size": page, "C": C, "width": width,
              "indptr_stride": indptr_stride, "r2t_width": r2t_width, "pool_rows": pool_rows, "grid": G,
              "pid": pid}
    run = Run(sp.name, sp.label, res, hyps, functions, tensors, regions,
              z3.If(pid == 0, z3.IntVal(-1), pid * sp.BLOCK_B), pid * sp.BLOCK_B + sp.BLOCK_B, report,
              run_lemmas + axioms, axioms)
    run.spec = sp
    return run


def kv_lemmas(b, q):
    """Instances for branch (b, t = q mod K) in row iters = q div K + 1: the segment ends
    within used_len(iters) <= used_len(num_steps) <= width."""
    from . import lemmas as SL
    it, t, s = q / K + 1, q % K, seq_len(b)
    return [SL.at(SL.div_lt, q, K, D), SL.at(SL.div_mod_range, q, K),
            _mul_mono(t, K - 1, s + it), K_.instantiate(L.prefix_monotone(num_seqs), num_seqs, b + 1),
            _mul_mono(P(b + 1), P(num_seqs), K), _mul_mono(b + 1, num_seqs, it * K),
            _mul_mono(it, D, num_seqs * K), _mul_mono(it, D, width),
            SL.at(SL.kv_segment_in_row, P(b), P(num_seqs), b, num_seqs, t, it, s, K, D, width),
            SL.at(SL.kv_extension_read_in_row, s, t, LANES[2], K, D, page)]


# --- tree build -------------------------------------------------------------------------------

MODE_NAMES = {0: "FULL", 1: "QLEN", 2: "BITPACK"}


@dataclass(frozen=True)
class TreeSpec:
    MODE: int
    DEPTH: int
    BLOCK_B: int
    NODES: int

    @property
    def name(self):
        return f"BUILD-TREE-{MODE_NAMES[self.MODE]}"

    @property
    def mask_dtype(self):
        if self.MODE != 2:
            return "int1"
        return {8: "uint8", 16: "uint16", 32: "uint32"}[max(8, self.NODES)]

    @property
    def label(self):
        return f"NODES={self.NODES},DEPTH={self.DEPTH},BLOCK_B={self.BLOCK_B}"


@dataclass(frozen=True)
class FillSpec:
    BLOCK_B: int
    NODES: int
    BLOCK_C: int
    name = "FILL-PREFIX"

    @property
    def label(self):
        return f"BLOCK_B={self.BLOCK_B},NODES={self.NODES},BLOCK_C={self.BLOCK_C}"


def _tree_common(hyps, G, plan, block, scalars, **contracts) -> list:
    """Preconditions shared by the tree kernels (into ``hyps``); returns the launch contracts."""
    hyps.update(labelled(spec.tree_shape_ok(K, D, N)))
    hyps.update(labelled(spec.context_ok(C)))
    hyps.update(labelled(spec.int32_arg_ok(C, "max_context_len")))
    hyps.update(_int32_args(scalars))
    # no int32 grid contract: the kernels widen the program id (pid.to(tl.int64) * BLOCK)
    return _contracts(batch_nonempty=(bs >= 1, "the launch wrapper returns before launching an empty batch"),
                      grid_is_cdiv=(G == plan.grid[0], f"the wrapper launches cdiv(bs, {block}) programs"),
                      **contracts)


def _tree_tensors(functions, hyps, mode, mask_dtype):
    sel = z3.Function("selected_index", z3.IntSort(), z3.IntSort())
    pl = z3.Function("parent_list", z3.IntSort(), z3.IntSort())
    for f in (sel, pl):
        hyps.update(_content(functions, f, f"{f.name()}_int64", lambda i, v: z3.And(v >= INT64.lo(), v < INT64.hi())))
    requests = _requests(bs)
    hyps.update(requests)
    _register(functions, seq_len, _seq_len_schema(requests))
    _register(functions, P, _prefix_schema(bs))
    pl_width, sel_width = z3.Ints("pl_width sel_width")
    return {
        "parent_list_ptr": TensorModel("parent_list", bs * pl_width, INT64, pl),
        "selected_index_ptr": TensorModel("selected_index", bs * sel_width, INT64, sel),
        "seq_lens_ptr": TensorModel("seq_lens", bs, INT64, seq_len),
        "prefix_ptr": TensorModel("prefix", bs, INT64, P),
        "tree_mask_ptr": TensorModel("tree_mask", spec.mask_batch_numel(mode, bs, N, P(bs)), DTYPES[mask_dtype],
                                     written=True),
        "positions_ptr": TensorModel("positions", bs * N, INT64, written=True),
        "retrive_index_ptr": TensorModel("retrive_index", bs * N, INT64, written=True),
        "next_token_ptr": TensorModel("retrive_next_token", bs * N, INT64, written=True),
        "next_sibling_ptr": TensorModel("retrive_next_sibling", bs * N, INT64, written=True),
    }, pl_width, sel_width


def _mask_region(mode):
    base = lambda r: spec.mask_request_base(mode, r, N, P(r))

    def ordering(ra, rb, k):
        return [K_.instantiate(L.prefix_monotone(), rb, ra + 1), _mul_mono(P(ra + 1), P(rb), N),
                _mul_mono(ra + 1, rb, N * N), _mul_mono(ra + 1, rb, N)]
    return Region(lambda a: a.env["b"].e, lambda a: z3.IntVal(0), lambda r, k: base(r), lambda r, k: base(r + 1),
                  lambda k: z3.IntVal(0), lambda k: spec.mask_batch_numel(mode, bs, N, P(bs)), ordering,
                  lambda ka, kb: [])


def _token_region():
    return Region(lambda a: a.env["b"].e, lambda a: z3.IntVal(0),
                  lambda r, k: spec.token_cell(r, 0, N), lambda r, k: spec.token_cell(r + 1, 0, N),
                  lambda k: z3.IntVal(0), lambda k: bs * N, lambda ra, rb, k: [_mul_mono(ra + 1, rb, N)],
                  lambda ka, kb: [])


def tree_lemmas(b, pl_width, sel_width):
    s = seq_len(b)
    return [K_.instantiate(L.prefix_monotone(), bs, b + 1), K_.instantiate(L.prefix_monotone(), bs, b),
            _mul_mono(P(b + 1), P(bs), N), _mul_mono(b + 1, bs, N * N), _mul_mono(b + 1, bs, N),
            _mul_mono(LANES[1], N - 1, s + N), _mul_mono(b + 1, bs, pl_width), _mul_mono(b + 1, bs, sel_width)]


def tree_run(sp: TreeSpec, *, transform=None, host: dict | None = None) -> Run:
    host = host or {}
    mode = spec.TreeMaskMode(sp.MODE)
    functions: dict = {}
    hyps: dict = {}
    tensors, pl_width, sel_width = _tree_tensors(functions, hyps, mode, sp.mask_dtype)
    G = z3.Int("grid")
    scalars = {"bs": _scalar("bs", bs), "topk": _scalar("topk", K), "pl_width": _scalar("pl_width", pl_width),
               "sel_width": _scalar("sel_width", sel_width), "n": _scalar("n", N)}
    # the wrapper's own launch plan, on Z3 terms: its grid, widths and walk bound are the contracts
    plan = launch_plans().tree_plan(tensors, bs=bs, topk=K, depth=D, n=N, mode=mode, block_b=sp.BLOCK_B,
                                    nodes=sp.NODES)
    _check_plan("build_tree_kernel", plan, scalars, tensors)
    contracts = {
        "DEPTH_is_walk_max_steps": (host["depth_hyp"](D) if "depth_hyp" in host else plan.constexprs["DEPTH"] == sp.DEPTH,
                                    f"the wrapper specializes DEPTH = spec.walk_max_steps(D) (here {sp.DEPTH})"),
        "pl_width_is_spec": (pl_width == plan.args["pl_width"],
                             "the wrapper passes pl_width = spec.parent_list_width(K, D)"),
        "sel_width_is_spec": (sel_width == plan.args["sel_width"],
                              "the wrapper passes sel_width = spec.selected_index_width(n)")}
    if mode is spec.TreeMaskMode.QLEN_ONLY_BITPACKING:
        hyps.update(labelled(spec.bitpack_ok(N)))
        contracts["mask_item_bits"] = (spec.bitpack_item_bits(N) == DTYPES[sp.mask_dtype].bits,
                                       f"the wrapper allocates {sp.mask_dtype} mask items for n <= {sp.NODES}")
    axioms = _tree_common(hyps, G, plan, sp.BLOCK_B, scalars, **contracts)
    hyps.update(labelled(spec.lane_bound_ok(N, sp.NODES, "NODES")))
    if "nodes_lanes" in host:  # a mutant's host with fewer node lanes than nodes
        hyps["lane_bound_NODES"] = host["nodes_lanes"](N, sp.NODES)
    ex = Executor(kernel_path("tree_build"), "build_tree_kernel", constexprs=dict(plan.constexprs, DEPTH=sp.DEPTH),
                  scalars=scalars, tensors=tensors, grid=[G], transform=transform,
                  oracle=make_oracle(hyps, functions, axioms))
    res = ex.run()
    res.block, res.extra_owner, res.batch = sp.BLOCK_B, False, bs
    functions.update(res.functions)
    regions = {"tree_mask": _mask_region(mode)}
    for name in ("positions", "retrive_index", "retrive_next_token", "retrive_next_sibling"):
        regions[name] = _token_region()
    run_lemmas = list(res.side_proofs)
    for e in {a.env["b"].e.get_id(): a.env["b"].e for a in res.accesses if "b" in a.env}.values():
        run_lemmas += tree_lemmas(e, pl_width, sel_width)
    pid = res.pid[0]
    report = {"bs": bs, "topk": K, "depth": D, "n": N, "C": C, "grid": G, "pid": pid}
    run = Run(sp.name, sp.label, res, hyps, functions, tensors, regions,
              pid * sp.BLOCK_B, pid * sp.BLOCK_B + sp.BLOCK_B, report, run_lemmas + axioms, axioms)
    run.spec = sp
    return run


def tree_value_obligations(run: Run) -> list:
    """The walk is bounded: every stored position is seq_len[b] + depth with
    0 <= depth <= spec.walk_max_steps(D) (a cycle in a malformed tree cannot push it further)."""
    out = []
    for i, a in enumerate(run.result.accesses):
        if a.kind != "store" or a.tensor.name != "positions":
            continue
        b = a.env["b"].e
        v = a.value.e
        goal = z3.And(seq_len(b) <= v, v <= seq_len(b) + spec.walk_max_steps(D))
        out.append(Obligation(f"walk-bounded-positions@{a.line}#{i}", "value", a.line,
                              "stored position = seq_len + depth with depth <= walk_max_steps(D)",
                              run.base_hyps(a.path, a.shape, a.mask), goal, list(run.lemmas),
                              replay=("output", "positions")))
    return out


def fill_run(sp: FillSpec, *, transform=None, host: dict | None = None) -> Run:
    mode = spec.TreeMaskMode.FULL_MASK
    functions: dict = {}
    hyps: dict = {}
    tensors, _plw, _selw = _tree_tensors(functions, hyps, mode, "int1")
    tensors = {k: tensors[k] for k in ("tree_mask_ptr", "seq_lens_ptr", "prefix_ptr")}
    for unread in ("selected_index_int64", "parent_list_int64"):
        del hyps[unread]
    G = z3.Int("grid")
    scalars = {"bs": _scalar("bs", bs), "n": _scalar("n", N)}
    plan = launch_plans().fill_plan(tensors, bs=bs, n=N, block_b=sp.BLOCK_B, nodes=sp.NODES, block_c=sp.BLOCK_C)
    _check_plan("fill_prefix_kernel", plan, scalars, tensors)
    axioms = _tree_common(hyps, G, plan, sp.BLOCK_B, scalars)
    hyps.update(labelled(spec.lane_bound_ok(N, sp.NODES, "NODES")))
    ex = Executor(kernel_path("tree_build"), "fill_prefix_kernel", constexprs=dict(plan.constexprs),
                  scalars=scalars, tensors=tensors, grid=[G], transform=transform,
                  oracle=make_oracle(hyps, functions, axioms))
    res = ex.run()
    res.block, res.extra_owner, res.batch = sp.BLOCK_B, False, bs
    functions.update(res.functions)
    run_lemmas = list(res.side_proofs)
    for e in {a.env["b"].e.get_id(): a.env["b"].e for a in res.accesses if "b" in a.env}.values():
        run_lemmas += tree_lemmas(e, z3.IntVal(0), z3.IntVal(0))
    pid = res.pid[0]
    report = {"bs": bs, "n": N, "C": C, "grid": G, "pid": pid}
    run = Run(sp.name, sp.label, res, hyps, functions, tensors, {"tree_mask": _mask_region(mode)},
              pid * sp.BLOCK_B, pid * sp.BLOCK_B + sp.BLOCK_B, report, run_lemmas + axioms, axioms)
    run.spec = sp
    return run
