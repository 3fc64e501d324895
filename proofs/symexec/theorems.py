"""Kernel theorems: obligations grouped per kernel and specialization, with witnesses and
mutants refuted by replayed counterexamples, as :class:`~specbound.proofs.theorem.TheoremResult`
so they join the same JSON report as the spec theorems.

Ids: ``KERNEL-<KERNEL>-<PROPERTY>[<constexprs>]``, e.g.
``KERNEL-BUILD-TREE-FULL-IN-BOUNDS[NODES=8,DEPTH=3,BLOCK_B=2]`` or
``KERNEL-KV-RACE-FREE[BLOCK_B=2,PAIRS=8,...]``.
"""

from __future__ import annotations

import ast
import time
from dataclasses import dataclass, field
from typing import Callable

import z3

from specbound.proofs.theorem import MutantResult, TheoremResult, axioms_of

from . import models
from .obligations import check

FAMILY = "kernel symexec"


class KernelTheoremResult(TheoremResult):
    """A kernel theorem is ok when every obligation is proved and witnessed (or proved dead: an
    access no lane ever activates in this specialization, such as the parent_list loads when
    D = 1), at least one is witnessed, and every mutant attached to it is refuted by a replay.  Mutants are about the kernel source, so they run
    on the first specialization of each kernel; a theorem of another specialization (or a
    property without a source mutant) carries none and ``mutants_on`` says where they ran."""

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


# --- source mutations (AST rewrites of the kernel text, in memory) ---------------------------------

class _Rewrite(ast.NodeTransformer):
    """Apply ``fn`` to every node of function ``func``; ``fn`` returns a replacement or None.
    The rewrite must fire at least once (a mutant that changes nothing is an error)."""

    def __init__(self, func, fn):
        self.func, self.fn, self.hits, self.inside = func, fn, 0, False

    def visit_FunctionDef(self, node):
        if node.name != self.func:
            return node
        self.inside = True
        self.generic_visit(node)
        self.inside = False
        return node

    def generic_visit(self, node):
        node = super().generic_visit(node)
        if self.inside:
            rep = self.fn(node)
            if rep is not None:
                self.hits += 1
                return rep
        return node


def rewrite(func: str, fn: Callable):
    def transform(tree):
        r = _Rewrite(func, fn)
        tree = r.visit(tree)
        if r.hits == 0:
            raise ValueError(f"mutant rewrite of {func} matched nothing: the kernel changed")
        return tree
    return transform


def _src(node):
    try:
        return ast.unparse(node)
    except Exception:
        return ""


def _replace_expr(old: str, new: str):
    def fn(node):
        if isinstance(node, ast.expr) and _src(node) == old:
            new_node = ast.parse(new, mode="eval").body
            for part in ast.walk(new_node):  # obligations name the mutated line, not line 1
                ast.copy_location(part, node)
            return new_node
        return None
    return fn


def _drop_stmt(pred):
    def fn(node):
        if isinstance(node, ast.FunctionDef):
            body = [s for s in node.body if not pred(s)]
            if len(body) != len(node.body):
                node.body = body
                return node
        return None
    return fn


@dataclass
class KernelMutant:
    id: str
    description: str
    prop: str                       # the property whose obligations refute it
    transform: Callable | None = None
    host: dict = field(default_factory=dict)
    expect: tuple = ("oob",)        # replay verdicts that reproduce the fault
    spec_override: Callable | None = None  # sp -> sp (e.g. a smaller lane bound)
    limits: dict = field(default_factory=dict)
    content_box: dict = field(default_factory=dict)  # tensor-content function -> (lo, hi) for the replay


def _swap(mid: str, description: str, prop: str, func: str, old: str, new: str, expect=("output",)):
    """A mutant that replaces one expression of ``func``'s source (``old`` -> ``new``)."""
    return KernelMutant(mid, description, prop, transform=rewrite(func, _replace_expr(old, new)), expect=expect)


KV_LIMITS = {"num_seqs": (1, 4), "topk": (1, 4), "num_steps": (1, 4), "page_size": (1, 4), "C": (1, 24),
             "width": (0, 400), "indptr_stride": (1, 40), "r2t_width": (1, 200), "pool_rows": (1, 6),
             "grid": (1, 4)}
TREE_LIMITS = {"bs": (1, 3), "topk": (1, 4), "depth": (1, 4), "n": (1, 8), "C": (1, 24), "grid": (1, 3)}

KV_MUTANTS = (
    _swap("MUT-KV-COPY-STOPS-EARLY",
          "the prefix copy loop stops one column block early (range(0, s_max - BLOCK_C, BLOCK_C)): the last "
          "block of every prefix is never copied, while every access stays in bounds (a truncated copy)",
          "NO-TRUNCATION", "draft_kv_kernel", "range(0, s_max, BLOCK_C)", "range(0, s_max - BLOCK_C, BLOCK_C)"),
    KernelMutant("MUT-KV-TOKENS-INT32",
                 "req_to_token entries pass through int32 before the kv_indices store: a token slot >= 2^31 "
                 "wraps (an int32 wrap in a stored value; every offset stays in bounds)", "NO-WRAP",
                 transform=rewrite("draft_kv_kernel", _replace_expr("vals[:, None, :]", "vals.to(tl.int32)[:, None, :]")),
                 host={"r2t_from_counterexample": True}, expect=("assert", "output"),
                 content_box={"req_to_token": (-2**40, 2**40)}),
    KernelMutant("MUT-27338-HOST-WIDTH-NO-TOPK",
                 "host sizes the kv_indices row num_seqs*C (topk factor dropped, sglang #27338) and skips the "
                 "capacity check", "IN-BOUNDS",
                 host={"width_hyp": lambda ns, k, c, d, w: w == ns * c,
                       "room": True}, expect=("oob",)),
    _swap("MUT-KV-TAIL-NO-MASK",
          "prefix copy without the tail mask c < seq_len (the last column block copies past the prefix)",
          "IN-BOUNDS",
          "draft_kv_kernel", "req_ok[:, None] & (c[None, :] < s2)", "req_ok[:, None]", expect=("oob", "output")),
    KernelMutant("MUT-KV-STEPS-LANES-BELOW-BATCH",
                 "STEPS lane bound smaller than num_steps, its device_assert removed: program 1 also writes "
                 "kv_indptr entry 0 (a race, not an out-of-bounds access)", "RACE-FREE",
                 transform=rewrite("draft_kv_kernel", _drop_stmt(
                     lambda s: "device_assert(num_steps <= STEPS" in _src(s))),
                 host={"steps_lanes": lambda d, lanes: z3.And(lanes < d, d <= 2 * lanes)},
                 expect=("race",), limits={"num_steps": (1, 8), "num_seqs": (1, 4)}),
    _swap("MUT-KV-INDPTR-ENTRY-VALUE",
          "kv_indptr entry z = b*K + t + 1 stores P[b]*K + t*seq_len + z*iters (the branch's own prefix "
          "left out): every store stays in bounds, in its region and race free; only the footprint "
          "value (spec.kv_indptr_entry of spec.kv_positions_prefix) sees it", "FOOTPRINT",
          "draft_kv_kernel", "(t2 + 1) * s2", "t2 * s2"),
    _swap("MUT-KV-EXTENSION-READ-STRIDE",
          "contiguous branches read their extension at seq_len + t*(num_steps - 1) + e: every read and "
          "store stays in bounds and every cell is the spec's, but branches share tokens; only the "
          "stored value (spec.kv_extension_read) sees it", "FOOTPRINT",
          "draft_kv_kernel", "s2 + t2 * num_steps", "s2 + t2 * (num_steps - 1)"),
)

TREE_MUTANTS = (
    KernelMutant("MUT-POSITIONS-INT32",
                 "positions computed in int32 (seq_len + depth): a request with seq_len + depth >= 2^31 gets a "
                 "negative position, while every offset stays int64 and in bounds (an int32 wrap); replayed "
                 "in the QLEN_ONLY layout, whose mask does not grow with seq_len, where the interpreter's "
                 "int32 overflow check fires (compiled, the position would silently wrap)",
                 "NO-WRAP", transform=rewrite("build_tree_kernel", _replace_expr(
                     "s2 + depth", "s2.to(tl.int32) + depth.to(tl.int32)")),
                 expect=("assert", "output"), spec_override=lambda sp: models.TreeSpec(1, sp.DEPTH, sp.BLOCK_B, sp.NODES),
                 limits={"C": (1, 2**31 - 1)}, content_box={"seq_len": (0, 2**31 - 1), "P": (0, 2**33)}),
    KernelMutant("MUT-NODES-LANES-BELOW-N",
                 "NODES lane bound smaller than num_draft_tokens, its device_assert removed: nodes past NODES "
                 "get no mask row, position or links (a truncated tree; every access in bounds)", "NO-TRUNCATION",
                 transform=rewrite("build_tree_kernel", _drop_stmt(lambda s: "device_assert(n <= NODES" in _src(s))),
                 host={"nodes_lanes": lambda n, lanes: z3.And(lanes < n, n <= 2 * lanes)},
                 expect=("output",), limits={"n": (1, 16)}),
    _swap("MUT-TREE-PROGRAM-STRIDE",
          "program p starts at request p*(BLOCK_B - 1): neighbouring programs both build the request between "
          "them (a race) and the last request may be left out", "RACE-FREE",
          "build_tree_kernel", "pid.to(tl.int64) * BLOCK_B", "pid.to(tl.int64) * (BLOCK_B - 1)",
          expect=("race", "output")),
    _swap("MUT-WALK-UNBOUNDED",
          "the root-ward walk runs DEPTH + 1 steps (bound larger than D): a cycle pushes depth past D",
          "WALK-BOUNDED",
          "build_tree_kernel", "tl.static_range(DEPTH)", "tl.static_range(DEPTH + 1)"),
    _swap("MUT-SEARCH-PAST-ROW",
          "parent search scans n entries of the (n-1)-entry selected_index row (sglang's CUDA kernel)",
          "IN-BOUNDS",
          "build_tree_kernel", "node2 < sel_width", "node2 < n", expect=("oob",)),
    _swap("MUT-MASK-ROW-STRIDE",
          "FULL_MASK tree columns stored with row stride seq_len + n - 1 instead of spec.mask_row_width "
          "(seq_len + n): every cell stays inside its request's region (so in bounds and race free), but "
          "rows overlap and the last cells are never written; only the footprint obligation sees it",
          "FOOTPRINT",
          "build_tree_kernel", "(s3 + n) * t3", "(s3 + n - 1) * t3"),
)

FILL_MUTANTS = (
    _swap("MUT-FILL-STOPS-EARLY",
          "the fill loop stops one column block early (range(0, s_max - BLOCK_C, BLOCK_C)): the last block of "
          "every prefix row stays unfilled, every store in bounds (a truncated fill)", "NO-TRUNCATION",
          "fill_prefix_kernel", "range(0, s_max, BLOCK_C)", "range(0, s_max - BLOCK_C, BLOCK_C)"),
    _swap("MUT-FILL-PROGRAM-STRIDE",
          "program p starts at request p*(BLOCK_B - 1): neighbouring programs both fill the request between "
          "them (a race)", "RACE-FREE",
          "fill_prefix_kernel", "pid.to(tl.int64) * BLOCK_B", "pid.to(tl.int64) * (BLOCK_B - 1)",
          expect=("race", "output")),
    _swap("MUT-FILL-TAIL-NO-MASK",
          "prefix fill without the tail mask c < seq_len (the last column block writes past the row)",
          "IN-BOUNDS",
          "fill_prefix_kernel", "row_ok & (c < s3)", "row_ok", expect=("oob",)),
    _swap("MUT-FILL-TAIL-SHORT",
          "prefix fill masked c < seq_len - 1 (the last prefix column of every row is never filled): every "
          "store is in bounds, in its region and its own cell, so only the completeness (coverage) "
          "obligation sees it", "FOOTPRINT",
          "fill_prefix_kernel", "row_ok & (c < s3)", "row_ok & (c < s3 - 1)"),
    _swap("MUT-FILL-STORES-FALSE",
          "prefix fill stores False: exactly the spec's cells, in bounds and race free, but every draft "
          "token would be masked from its own prefix; only the stored value sees it", "FOOTPRINT",
          "fill_prefix_kernel", "tl.full([BLOCK_B, NODES, BLOCK_C], 1, tl.int1)",
          "tl.full([BLOCK_B, NODES, BLOCK_C], 0, tl.int1)"),
)

# (kernel, property) pairs whose first specialization carries no mutant, and why: every other
# property of every kernel refutes at least one by replay.
WITHOUT_MUTANT = {
    ("fill", "NO-WRAP"): "every value the prefix fill computes is an offset into a mask of S*n + bs*n^2 cells or "
                         "a column below seq_len, so an int32 wrap there needs a replay of 2^31 mask cells",
}

# Mutants only the FOOTPRINT obligations see: bounds, regions and races stay proved on them.
FOOTPRINT_ONLY = {"tree": ("MUT-MASK-ROW-STRIDE",),
                  "kv": ("MUT-KV-INDPTR-ENTRY-VALUE", "MUT-KV-EXTENSION-READ-STRIDE"),
                  "fill": ("MUT-FILL-TAIL-SHORT", "MUT-FILL-STORES-FALSE")}


# --- specializations --------------------------------------------------------------------------------

def default_specs():
    """The representative subset run by ``pytest proofs`` and ``specbound prove --kernels``."""
    return {
        "kv": [models.KvSpec(2, 8, 4, 16), models.KvSpec(1, 16, 8, 128, "int32", "int32")],
        # DEPTH = 8: the walk unrolls eight one-hot steps (kept cheap by Executor.define)
        "tree": [models.TreeSpec(0, 3, 2, 8), models.TreeSpec(1, 3, 2, 8), models.TreeSpec(2, 3, 2, 8),
                 models.TreeSpec(1, 8, 2, 8)],
        "fill": [models.FillSpec(2, 8, 16)],
    }


def all_specs():
    """Every specialization serving uses (``--all`` / ``pytest --specbound-all``): each power-of-two
    lane bound up to 1024, both dtypes of the kv outputs, all three layouts with every
    BITPACKING item width, DEPTH 1..8, 16 and 32, and several tile sizes."""
    pow2 = [1 << i for i in range(11)]
    kv = []
    for pairs in pow2:
        steps = min(pairs, 8)
        kv.append(models.KvSpec(max(1, 4096 // (pairs * 128)) if pairs < 32 else 1, pairs, steps, 128))
    for steps in (1, 2, 4, 8, 16):
        kv.append(models.KvSpec(2, max(steps, 16), steps, 16, "int32", "int32"))
    for block_c in (16, 256, 1024):
        kv.append(models.KvSpec(4, 8, 4, block_c, "int64", "int32"))
    tree = []
    for nodes in pow2:
        for mode in (0, 1):
            tree.append(models.TreeSpec(mode, 3, max(1, 2048 // (nodes * nodes)), nodes))
    for nodes in (8, 16, 32):
        tree.append(models.TreeSpec(2, 4, 2, nodes))
    # DEPTH is D itself (no power of two): 1..8 covers EAGLE's usual step counts, 16 and 32
    # show the walk's cost stays flat (one defined selection per step)
    for depth in (*range(1, 9), 16, 32):
        tree.append(models.TreeSpec(1, depth, 2, 8))
    tree += [models.TreeSpec(0, 8, 2, 8), models.TreeSpec(2, 8, 2, 32)]
    fill = [models.FillSpec(bb, nodes, bc) for bb, nodes, bc in
            ((1, 1, 16), (2, 8, 16), (4, 16, 256), (1, 1024, 1024), (8, 64, 128))]
    # The default subset comes first (and is included): mutants run on the first specialization
    # of each kernel, which must exercise the faults (e.g. K > 1 for the #27338 width mutant;
    # PAIRS = 1 forces K = 1).
    out = {}
    for kind, specs in (("kv", kv), ("tree", tree), ("fill", fill)):
        first = default_specs()[kind]
        out[kind] = first + [sp for sp in specs if sp not in first]
    return out


def selected_specs(full: bool = False):
    """Every covered specialization when ``full``, else the default subset."""
    return all_specs() if full else default_specs()


BUILDERS = {
    "kv": (models.kv_run, KV_MUTANTS, KV_LIMITS, "replay_kv", ("IN-BOUNDS", "NO-WRAP", "NO-TRUNCATION", "RACE-FREE", "FOOTPRINT")),
    "tree": (models.tree_run, TREE_MUTANTS, TREE_LIMITS, "replay_tree",
             ("IN-BOUNDS", "NO-WRAP", "NO-TRUNCATION", "RACE-FREE", "FOOTPRINT", "WALK-BOUNDED")),
    "fill": (models.fill_run, FILL_MUTANTS, TREE_LIMITS, "replay_fill",
             ("IN-BOUNDS", "NO-WRAP", "NO-TRUNCATION", "RACE-FREE", "FOOTPRINT")),
}


def obligations(run, prop: str, *, bounds=None, executor=None, races=None, values=None, footprints=None) -> list:
    """The obligations of one property.  The kernel-specific parts default to our kernels'
    (``models.Run`` regions and races, the walk bound, :mod:`.footprint`); a third-party
    kernel's model passes its own (``races`` then gives the region and race obligations)."""
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
    if "value" in kinds:
        obs += values(run) if values else models.tree_value_obligations(run)
    if "footprint" in kinds:
        from . import footprint
        obs += footprints(run) if footprints else footprint.obligations(run)
    return obs


def _evaluate(model, report) -> dict:
    out = {}
    for name, term in report.items():
        v = model.eval(term, model_completion=True)
        if z3.is_int_value(v):
            out[name] = v.as_long()
    return out


def refute(kind: str, sp, mutant: KernelMutant) -> MutantResult:
    """Run the mutated kernel/host symbolically; the first counterexample of the property is
    concretised and replayed; refuted only when the replay reproduces the fault."""
    from . import replay as R

    start = time.perf_counter()
    build, _m, limits, replay_name, _props = BUILDERS[kind]
    sp_m = mutant.spec_override(sp) if mutant.spec_override else sp
    host = dict(mutant.host)
    run = build(sp_m, transform=mutant.transform, host=host)
    notes = []
    for ob in obligations(run, mutant.prop):
        out = check(ob, run.functions, witness=False)
        if out.status != "counterexample":
            continue
        conc = R.concretise(run, ob, {**limits, **mutant.limits}, batch_cap=limits.get("num_seqs", limits.get("bs"))[1],
                            content_box=mutant.content_box)
        if conc is None:
            notes.append(f"{ob.id}: counterexample found but none inside the small box")
            continue
        rep = getattr(R, replay_name)(sp_m, conc, mutant.transform, host)
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


def prove_kernel(kind: str, sp, *, mutants: bool = True) -> list:
    """All property theorems of one kernel specialization."""
    build, muts, _limits, _replay, props = BUILDERS[kind]
    results = []
    run = build(sp)
    for prop in props:
        if prop == "WALK-BOUNDED" and kind != "tree":
            continue
        start = time.perf_counter()
        outcomes = [check(ob, run.functions) for ob in obligations(run, prop)]
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
    hyps_used = sorted({h for o in outcomes if o.proof for h in o.proof.hyps})
    cited = sorted({c for o in outcomes if o.proof for c in o.proof.cited})
    axioms = {name: ax for o in outcomes if o.proof for name, ax in axioms_of(o.proof).items()}
    witness = {}
    if outcomes and outcomes[0].witness is not None:
        witness = _evaluate(outcomes[0].witness, run.report)
    witness["obligations"] = len(outcomes)
    witness["witnessed"] = sum(o.witness is not None for o in outcomes)
    witness["dead"] = sum(o.status == "dead" for o in outcomes)  # accesses no lane ever activates
    tid = f"KERNEL-{run.name}-{prop}[{run.label}]"
    statement = f"{statement or PROPERTIES[prop][1]} (obligations by line: " + ", ".join(
        f"{o.obligation.kind}@{o.obligation.line}" for o in outcomes[:40]) + (", ..." if len(outcomes) > 40 else "") + ")"
    res = KernelTheoremResult(
        id=tid, statement=statement, family=FAMILY, status=status, seconds=seconds,
        rlimit=sum(o.rlimit for o in outcomes), rlimit_limit=0, hypotheses_used=hyps_used,
        lemmas_cited=cited, preconditions=sorted(run.hyps) + sorted(getattr(run, "contract", ())), witness=witness,
        mutants=mutants, detail=detail, axioms_used=axioms)
    res.outcomes = outcomes
    return res


def run_all(full: bool = False, kinds=("kv", "tree", "fill"), mutant_specs: int = 1,
            progress: Callable | None = None) -> list:
    """Every kernel theorem of the selected specializations; mutants on the first
    ``mutant_specs`` specializations of each kernel (they are about the kernel source).
    ``progress(done, total, kind, spec, new_results, results_so_far, seconds)`` is called
    after each specialization (a full run takes minutes)."""
    out = []
    specs = selected_specs(full)
    todo = [(kind, i, sp) for kind in kinds for i, sp in enumerate(specs[kind])]
    for done, (kind, i, sp) in enumerate(todo, 1):
        start = time.perf_counter()
        new = prove_kernel(kind, sp, mutants=i < mutant_specs)
        out += new
        if progress is not None:
            progress(done, len(todo), kind, sp, new, out, time.perf_counter() - start)
    return out
