"""sglang's Triton tree build ``sgl_build_tree_kernel_efficient_triton`` (what sglang runs on
XPU): launch model, host contract, specializations and obligations.

Every shape parameter of this kernel is a ``tl.constexpr`` — ``topk``, ``depth``,
``draft_token_num``, ``tree_mask_mode``, ``batch_size`` and both row strides — so Triton
compiles one kernel per (K, D, n, mode, batch size).  The proofs here are per (K, D, n, mode)
(:mod:`.tree_symbolic` proves IN-BOUNDS and NO-WRAP for every (K, D, n) of the envelope at once):
``batch_size`` is given to the executor as the batch's Z3 term ``bs`` (``TreeSpec.bs =
None``, every batch size from 1 to the envelope's largest, a declared precondition), which
is sound because the kernel uses it only in arithmetic, extents and the grid: the executor
refuses (``Unsupported``) if it ever flows into a shape or a loop trip count.  A concrete
``TreeSpec.bs`` proves that one batch size.  Within one, the program id, every
``seq_len``, the prefix sums and every tree entry are symbolic.

The kernel is scalar code: one program per request, loops over the nodes unrolled
(constexpr trip counts), data-dependent ``if``s on loaded values, and a read-modify-write
of ``retrieve_next_token`` (it reads the cells it wrote for earlier nodes: program-written
memory, :mod:`.memory`).

**Host contract** (``sgl_build_tree_kernel_triton``): grid ``(batch_size,)``; contiguous
``parent_list`` ``(bs, spec.parent_list_width(K, D))`` and ``selected_index``
``(bs, n - 1)`` (the constexpr strides are their row widths); ``seq_len_prefix_sum`` the
exclusive prefix sum of ``verified_seq_len``; ``tree_mask`` of ``spec.mask_batch_numel``
cells (FULL_MASK / QLEN_ONLY; BITPACKING is rejected by the wrapper); outputs of ``bs*n``
cells.  **Well-formed** trees: every ``selected_index`` entry names the root or a
``parent_list`` slot (``spec.parent_slot_kind != SLOT_INVALID``); sglang's own draft step
produces them and nothing checks it — without it the ``parent_list`` read is unguarded.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import z3

from specbound import spec
from specbound.proofs import core as proof_core
from specbound.proofs import lemmas as spec_lemmas
from specbound.proofs import model
from specbound.proofs.model import C, P, bs, labelled, seq_len

from specbound.proofs.symexec.interp import Executor
from specbound.proofs.symexec.kernel_files import torch_free_module
from specbound.proofs.symexec.models import Run, content_preconditions, prefix_schema, register_function, seq_len_schema, make_oracle
from specbound.proofs.symexec.obligations import Obligation
from specbound.proofs.symexec.values import DTYPES, INT32, INT64, TensorModel, Unsupported, V
from specbound.proofs.symexec.engine_theorems import prove as prove_run
from specbound.proofs.symexec.engine_theorems import refute
from specbound.proofs.symexec.theorems import obligations as generic

from specbound.engines.sglang.launch import TREE_KERNEL as KERNEL  # the one name of the kernel
from specbound.engines.sglang import launch as sglang
from specbound.replay import load_kernel
SOURCE = "kernels/ops/speculative/spec_tree.py"
# The largest batch a symbolic-batch proof covers: the serving envelope's (kernels/plan.py).
BATCH_MAX = torch_free_module("plan").ENVELOPE.batch[1]
MODE_NAMES = {0: "FULL", 1: "QLEN"}


@dataclass(frozen=True)
class TreeSpec:
    topk: int
    depth: int
    n: int          # draft_token_num
    mode: int       # 0 FULL_MASK, 1 QLEN_ONLY
    bs: int | None = None   # batch_size: None = symbolic, 1..BATCH_MAX; an int = that batch size only

    @property
    def name(self):
        return f"SGLANG-TREE-{MODE_NAMES[self.mode]}"

    @property
    def label(self):
        return f"K={self.topk},D={self.depth},n={self.n},mode={MODE_NAMES[self.mode]},batch_size={self.batches}"

    @property
    def batches(self) -> str:
        """The batch sizes one proof covers: ``N`` or ``1..BATCH_MAX`` (symbolic)."""
        return str(self.bs) if self.bs is not None else f"1..{BATCH_MAX}"

    @property
    def pl_width(self):
        return spec.parent_list_width(self.topk, self.depth)

    @property
    def sel_width(self):
        return spec.selected_index_width(self.n)


@dataclass
class Host:
    """Replaceable host facts: ``extents`` (tensor name -> Z3 numel), ``drop`` (preconditions
    left out: ``well_formed_tree`` to refute the unguarded read)."""

    extents: dict = field(default_factory=dict)
    drop: tuple = ()


def well_formed(sel_value, sp: TreeSpec):
    return spec.parent_slot_kind(sel_value, sp.topk, sp.depth) != spec.SLOT_INVALID


def run_kernel(sp: TreeSpec, path: str, host: Host | None = None) -> Run:
    """The symbolic run of one specialization ``sp``: a :class:`TreeSpec`, or a spec whose
    K, D, n are Z3 terms (:class:`.tree_symbolic.EnvelopeSpec`: its ``hyps`` state their
    ranges, and its loops are summarised)."""
    host = host or Host()
    if sp.mode not in MODE_NAMES:
        raise ValueError(f"tree_mask_mode {sp.mode}: sglang's Triton port rejects BITPACKING")
    shape = spec.tree_shape_ok(sp.topk, sp.depth, sp.n)
    symbolic = any(spec.is_symbolic(c.holds) for c in shape)
    if not symbolic and not all(c.holds for c in shape):
        raise ValueError(f"{sp.label}: not a draft tree shape ({[c.text for c in shape if not c.holds]})")
    functions: dict = {}
    sel = z3.Function("selected_index", z3.IntSort(), z3.IntSort())
    pl = z3.Function("parent_list", z3.IntSort(), z3.IntSort())
    sel_cells = bs * sp.sel_width
    hyps = labelled(spec.context_ok(C))
    if symbolic:   # the shape's ranges and tree_shape_ok: preconditions of the one proof
        hyps.update(sp.hyps())
    # per-request and per-entry conditions: quantified hypotheses, used at each value read
    # through the core's instances
    sel_more = {} if "well_formed_tree" in host.drop else {
        "well_formed_tree": lambda i, v: z3.Implies(z3.And(0 <= i, i < sel_cells), well_formed(v, sp))}
    hyps.update(content_preconditions(functions, sel, "selected_index_int64", lambda i, v: z3.And(v >= INT64.lo(), v < INT64.hi()),
                         **sel_more))
    hyps.update(content_preconditions(functions, pl, "parent_list_int64", lambda i, v: z3.And(v >= INT64.lo(), v < INT64.hi())))
    requests = model.per_request(model.seq_len_conds, size=bs)
    hyps.update(requests)
    register_function(functions, seq_len, seq_len_schema(requests))
    # the prefix's definition only: the lemmas this scalar kernel needs are cited once, below
    register_function(functions, P, prefix_schema(bs, lemmas=False))
    mode = spec.TreeMaskMode(sp.mode)
    n = sp.n
    numel = {"parent_list": bs * sp.pl_width, "selected_index": sel_cells, "seq_lens": bs, "prefix": bs,
             "tree_mask": spec.mask_batch_numel(mode, bs, n, P(bs)), "positions": bs * n,
             "retrive_index": bs * n, "retrive_next_token": bs * n, "retrive_next_sibling": bs * n}
    numel.update(host.extents)
    tensors = {
        "parent_list_ptr": TensorModel("parent_list", numel["parent_list"], INT64, pl),
        "selected_index_ptr": TensorModel("selected_index", numel["selected_index"], INT64, sel),
        "verified_seq_len_ptr": TensorModel("seq_lens", numel["seq_lens"], INT64, seq_len),
        "seq_len_prefix_sum_ptr": TensorModel("prefix", numel["prefix"], INT64, P),
        "tree_mask_ptr": TensorModel("tree_mask", numel["tree_mask"], DTYPES["int1"], written=True),
        "positions_ptr": TensorModel("positions", numel["positions"], INT64, written=True),
        "retrieve_index_ptr": TensorModel("retrive_index", numel["retrive_index"], INT64, written=True),
        "retrieve_next_token_ptr": TensorModel("retrive_next_token", numel["retrive_next_token"], INT64,
                                               written=True),
        "retrieve_next_sibling_ptr": TensorModel("retrive_next_sibling", numel["retrive_next_sibling"], INT64,
                                                 written=True),
    }
    if sp.bs is None:   # one proof for every batch size: batch_size is the batch's own term
        hyps["batch_size_in_envelope"] = z3.And(1 <= bs, bs <= BATCH_MAX)
        batch_size = V(bs, (), INT32)   # a constexpr below 2^31 enters arithmetic as int32
    else:
        hyps["batch_size_constexpr"] = bs == sp.bs   # the grid and every extent use it
        batch_size = sp.bs
    hyps.update(labelled(spec.int32_arg_ok(C, "max_context_len")))
    # the host's seq_len_prefix_sum is the exclusive prefix sum (its content function is P)
    # an empty row (D = 1, n = 1) is passed with stride 1
    constexprs = {"topk": sp.topk, "depth": sp.depth, "draft_token_num": n, "tree_mask_mode": sp.mode,
                  "batch_size": batch_size, "parent_list_stride": spec.ite(sp.pl_width == 0, 1, sp.pl_width),
                  "selected_index_stride": spec.ite(sp.sel_width == 0, 1, sp.sel_width)}
    # a symbolic constexpr (below 2^31) enters arithmetic as int32
    constexprs = {name: V(v, (), INT32) if spec.is_symbolic(v) else v for name, v in constexprs.items()}
    ex = Executor(path, KERNEL, constexprs=constexprs, scalars={}, tensors=tensors, grid=[bs],
                  oracle=make_oracle(hyps, functions, []), summarise_loops=symbolic)
    res = ex.run()
    functions.update(res.functions)
    res.block, res.extra_owner, res.batch = 1, False, bs
    b = res.pid[0]
    lemmas = [proof_core.instantiate(spec_lemmas.prefix_monotone(bs), bs, b + 1), proof_core.instantiate(spec_lemmas.prefix_monotone(bs), bs, b),
              proof_core.instantiate(spec_lemmas.prefix_bound(bs), b)]
    report = {"bs": bs, "C": C, "pid": b}
    if symbolic:   # the counterexample's or witness's tree shape
        report.update({"topk": sp.topk, "depth": sp.depth, "n": sp.n})
    run = Run(sp.name, sp.label, res, hyps, functions, tensors, {}, None, None,
              report, list(res.side_proofs) + lemmas)
    run.spec, run.host = sp, host
    # tensor contents the launch model fixes rather than assumes (listed with the preconditions)
    run.contract = ("model: seq_len_prefix_sum = the exclusive prefix sum P of verified_seq_len (sglang's wrapper "
                    "computes it)",)
    return run


# --- obligations ---------------------------------------------------------------------------------

# No NO-TRUNCATION: the kernel has no masked (arange) accesses, every access is one scalar cell.
PROPERTIES = ("IN-BOUNDS", "NO-WRAP", "RACE-FREE", "FOOTPRINT", "WALK-BOUNDED")
TOKEN_TENSORS = ("positions", "retrive_index", "retrive_next_token", "retrive_next_sibling")
EXACT = ("tree_mask", "positions", "retrive_index")   # written in full; the links only where a parent is found


def _row_base(run, a, b):
    """First cell of the row a store lands in: (mask) tree column 0 of row ``t`` of request
    b, t the kernel's node loop variable; (tokens) node 0 of request b."""
    sp = run.spec
    if a.tensor.name == "tree_mask":
        t = a.env.get("draft_tokenx")
        if isinstance(t, V) and t.shape == ():   # a symbolic node loop (tree_symbolic): its index term
            t = t.e
        elif not isinstance(t, int):
            raise Unsupported("footprint map: tree_mask store outside the constexpr node loop (draft_tokenx)", a.line)
        mode = spec.TreeMaskMode(sp.mode)
        return t, spec.mask_tree_cell(mode, b, t, 0, sp.n, seq_len(b), P(b))
    return None, spec.token_cell(b, 0, sp.n)


def _in_row(run, a):
    """The store's cell is one of the n cells of its row (request = the program's own)."""
    b = run.result.pid[0]
    _t, base = _row_base(run, a, b)
    off = a.off.e
    return z3.And(0 <= b, b < bs, base <= off, off < base + run.spec.n), off - base


def _stores(run):
    return [(i, a) for i, a in enumerate(run.result.accesses) if a.kind == "store"]


def race_obligations(run) -> list:
    """Each store lands in its own request's row cells, each read of an output reads its own
    request's cells (so no other program's store is involved: the memory model's premise),
    and rows of different requests never share a cell."""
    out = []
    for i, a in enumerate(run.result.accesses):
        if a.kind == "store" or (a.kind == "load" and a.tensor.written):
            goal, _col = _in_row(run, a)
            what = "stores into" if a.kind == "store" else "reads only"
            out.append(Obligation(f"own-row-{a.tensor.name}@{a.line}#{i}", "region", a.line,
                                  f"every active lane {what} its own request's row of {a.tensor.name}",
                                  run.base_hyps(a.path, a.shape, a.mask), goal, list(run.lemmas)))
    out += _requests_disjoint(run)
    return out


def _requests_disjoint(run) -> list:
    """Rows of request bA < bB never share a cell (none to state with one request: its one
    program cannot race)."""
    sp = run.spec
    if sp.bs is not None and sp.bs < 2:
        return []
    n = sp.n
    mode = spec.TreeMaskMode(sp.mode)
    ba, bb, ta, tb, ja, jb = z3.Ints("bA bB tA tB jA jB")
    hyps = dict(run.hyps)
    hyps["requests_ordered"] = z3.And(0 <= ba, ba < bb, bb < bs)
    hyps["cells"] = z3.And(0 <= ta, ta < n, 0 <= tb, tb < n, 0 <= ja, ja < n, 0 <= jb, jb < n)
    lem = [proof_core.instantiate(spec_lemmas.prefix_monotone(bs), bb, ba + 1), proof_core.instantiate(spec_lemmas.prefix_bound(bs), bb)]
    cell = lambda b_, t_, j_: spec.mask_tree_cell(mode, b_, t_, j_, n, seq_len(b_), P(b_))
    return [Obligation("requests-disjoint-tree_mask", "race", 0, "tree_mask cells of a request come before "
                       "every cell of a later request", hyps, cell(ba, ta, ja) < cell(bb, tb, jb), lem),
            Obligation("requests-disjoint-tokens", "race", 0, "token cells of a request come before every cell "
                       "of a later request", hyps, spec.token_cell(ba, ta, n) < spec.token_cell(bb, tb, n), [])]


def footprint_obligations(run) -> list:
    """Soundness (every store's cell is a spec cell of its own request's row; retrive_index
    stores its own cell) for every store, and completeness for the outputs written in full:
    every spec cell (t, j) is the cell of a store that runs unconditionally (its indices are
    constants of the unrolled loops: the set of them is compared with the spec's in full),
    and that store runs for every request."""
    sp = run.spec
    out = footprint_soundness(run)
    b = run.result.pid[0]
    covered: dict = {}
    for i, a in _stores(run):
        _goal, col = _in_row(run, a)
        unconditional = all(label.startswith("program_id") for label, _ in a.path) and z3.is_true(z3.simplify(a.mask))
        if a.tensor.name in EXACT and unconditional:
            t, _base = _row_base(run, a, b)
            j = z3.simplify(col)
            if z3.is_int_value(j):
                key = (a.tensor.name, t if a.tensor.name == "tree_mask" else None, j.as_long())
                covered.setdefault(key, (i, a))
    fb = z3.Int("cell_b")
    for name in EXACT:
        for t in (range(sp.n) if name == "tree_mask" else (None,)):
            for j in range(sp.n):
                hit = covered.get((name, t, j))
                where = f"t={t}, " if t is not None else ""
                if hit is None:   # no unconditional store writes this spec cell: an obligation that fails
                    out.append(Obligation(f"coverage-{name}[{where}j={j}]", "coverage", 0,
                                          f"spec cell ({where}column {j}) of every request is stored",
                                          dict(run.hyps), z3.BoolVal(False)))
                    continue
                i, a = hit
                hyps = dict(run.hyps)
                hyps["spec_request"] = z3.And(0 <= fb, fb < bs)
                hyps["chosen_pid"] = b == fb
                goal = z3.And(*[c for _l, c in a.path], a.mask)
                out.append(Obligation(f"coverage-{name}[{where}j={j}]@{a.line}#{i}", "coverage", a.line,
                                      f"the store of spec cell ({where}column {j}) runs for every request",
                                      hyps, goal, list(run.lemmas)))
    return out


def footprint_soundness(run) -> list:
    """Every store's cell is a spec cell of its own request's row (``retrive_index``: with its
    own cell as the value)."""
    out = []
    for i, a in _stores(run):
        goal, _col = _in_row(run, a)
        if a.tensor.name == "retrive_index":
            goal = z3.And(goal, a.value.e == a.off.e)
        out.append(Obligation(f"footprint-{a.tensor.name}@{a.line}#{i}", "footprint", a.line,
                              f"every active lane stores a spec cell of its own request's row of {a.tensor.name}"
                              + (" with its own cell as the value" if a.tensor.name == "retrive_index" else ""),
                              run.base_hyps(a.path, a.shape, a.mask), goal, list(run.lemmas)))
    return out


def walk_obligations(run) -> list:
    out = []
    b = run.result.pid[0]
    for i, a in _stores(run):
        if a.tensor.name != "positions":
            continue
        v = a.value.e
        out.append(Obligation(f"walk-bounded-positions@{a.line}#{i}", "value", a.line,
                              "stored position = seq_len + depth with 0 <= depth <= walk_max_steps(D)",
                              run.base_hyps(a.path, a.shape, a.mask),
                              z3.And(seq_len(b) <= v, v <= seq_len(b) + spec.walk_max_steps(run.spec.depth)),
                              list(run.lemmas)))
    return out


def obligations(run, prop: str) -> list:
    return generic(run, prop, races=race_obligations, values=walk_obligations, footprints=footprint_obligations)


# --- proving, refuting, replaying --------------------------------------------------------------------

REPLAY_LIMITS = {"C": (1, 24), "bs": (1, 4)}   # bs: a symbolic-batch counterexample's batch


def prove(sp: TreeSpec, path: str, host: Host | None = None, progress=None) -> list:
    return prove_run(run_kernel(sp, path, host), obligations, PROPERTIES, progress)


def refute_malformed(sp: TreeSpec, path: str):
    """Without well-formedness the unguarded ``parent_list`` read must leave its tensor; the
    counterexample is replayed on the kernel at ``path`` under the checked interpreter."""
    return refute_run(sp, path, Host(drop=("well_formed_tree",)), ("IN-BOUNDS",), ("oob",))


def refute_run(sp: TreeSpec, path: str, host: Host | None = None, props=PROPERTIES,
               expect=("oob", "race", "assert", "output"), limits: dict | None = None,
               content_box: dict | None = None):
    """The first counterexample of ``props`` under ``host`` that a replay on the kernel at
    ``path`` reproduces (see :func:`specbound.proofs.symexec.engine_theorems.refute`; ``limits`` widen the replay box,
    e.g. a ``seq_len`` near 2^31 for an int32 wrap)."""

    run = run_kernel(sp, path, host)
    batch = sp.bs if sp.bs is not None else REPLAY_LIMITS["bs"][1]
    cells = batch * max(sp.sel_width, sp.pl_width, sp.n)
    return refute(run, obligations, props, lambda conc: replay(sp, conc, path), {**REPLAY_LIMITS, **(limits or {})},
                  batch_cap=cells, expect=expect, content_box=content_box)


def replay(sp: TreeSpec, conc: dict, path: str):
    """The counterexample's trees, launched on sglang's tree kernel (source at ``path``) by
    :func:`specbound.engines.sglang.launch.build_tree`; its outputs are compared with the reference
    only for a well-formed tree."""

    c, batch = conc["_contents"], conc["bs"]   # the counterexample's batch (sp.bs when concrete)
    seq = [max(0, c["seq_len"](i)) for i in range(batch)]
    sel = [c["selected_index"](i) for i in range(batch * sp.sel_width)]
    pl = [c["parent_list"](i) for i in range(batch * sp.pl_width)]
    inputs = {"seq_lens": seq, "selected_index": sel, "parent_list": pl, "spec": sp.label}
    return sglang.build_tree(load_kernel(path, KERNEL), seq_lens=seq, selected_index=sel, parent_list=pl,
                             topk=sp.topk, depth=sp.depth, n=sp.n, mode=spec.TreeMaskMode(sp.mode),
                             sel_width=sp.sel_width, pl_width=sp.pl_width,
                             compare=all(bool(well_formed(v, sp)) for v in sel), inputs=inputs)
