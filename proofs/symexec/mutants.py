"""The one registry of kernel mutants: each id names one planted change to one of our kernels
(an AST rewrite of its source, or a host-side sizing with the kernel untouched) and one
replay recipe.

The same planted change serves both users:

* the symbolic refutation (:func:`.theorems.refute`) executes the rewritten source
  symbolically and replays its counterexample on :meth:`Plant.kernel` (the rewritten source
  compiled by :mod:`specbound.kernels.source`) through the kind's concrete launch
  (``replay.replay_<kind>``), expecting one of ``expect``;
* the fuzz (``specbound.fuzz.replay``) launches :meth:`Plant.kernel` on the counterexample
  of the spec theorem ``fuzz_theorem`` whose mutant of the same id models the same bug at
  the formula level.  A mutant the fuzz does not replay says why in ``fuzz_skip``.

Ids are stable: they are listed in docs/kernel-proofs.md and docs/invariants.md.
"""

from __future__ import annotations

import __future__
import ast
from dataclasses import dataclass, field
from typing import Callable

import z3

from . import kernel_files, models


class PlantFailed(RuntimeError):
    """A planted change matched nothing in the kernel's source (the kernel changed): the
    mutant checks nothing, which must never read as a pass."""


# --- the planted change ------------------------------------------------------------------------------

def _src(node) -> str:
    try:
        return ast.unparse(node)
    except Exception:
        return ""


class _Rewrite(ast.NodeTransformer):
    """Apply ``fn`` to every node of function ``func`` (children first); ``fn`` returns a
    replacement or None."""

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


def _replace_expr(old: str, new: str):
    def fn(node):
        if isinstance(node, ast.expr) and _src(node) == old:
            new_node = ast.parse(new, mode="eval").body
            for part in ast.walk(new_node):  # obligations name the mutated line, not line 1
                ast.copy_location(part, node)
            return new_node
        return None
    return fn


def _drop_stmt(needle: str):
    def fn(node):
        if isinstance(node, ast.FunctionDef):
            body = [s for s in node.body if needle not in _src(s)]
            if len(body) != len(node.body):
                node.body = body
                return node
        return None
    return fn


_KERNELS: dict = {}  # Plant -> the compiled kernel (a planted kernel is built once per process)


@dataclass(frozen=True)
class Plant:
    """One change to the source of ``func`` in ``specbound.kernels.<module>``: every
    expression whose text is ``old`` becomes ``new`` (each pair must match), and every
    top-level statement containing ``drop`` goes.  Line numbers are kept, so obligations and
    replays name the kernel's own lines."""
    module: str
    func: str
    replace: tuple = ()             # ((old expression text, new expression text), ...)
    drop: str = ""

    def transform(self, tree: ast.Module) -> ast.Module:
        edits = [(f"{old!r} -> {new!r}", _replace_expr(old, new)) for old, new in self.replace]
        if self.drop:
            edits.append((f"drop {self.drop!r}", _drop_stmt(self.drop)))
        for what, fn in edits:
            r = _Rewrite(self.func, fn)
            tree = r.visit(tree)
            if r.hits == 0:
                raise PlantFailed(f"{self.module}.{self.func}: {what} matched nothing: the kernel changed")
        ast.fix_missing_locations(tree)
        return tree

    def describe(self) -> str:
        parts = [f"{old} -> {new}" for old, new in self.replace] + ([f"drop `{self.drop}`"] if self.drop else [])
        return f"{self.func}: " + "; ".join(parts)

    def function_source(self, planted: bool = True) -> str:
        """The text of ``func`` (undecorated), with the change planted or as shipped."""
        return function_source(self.module, self.func, self.transform if planted else None)

    def kernel(self):
        """The planted kernel (built once per process)."""
        if self not in _KERNELS:
            _KERNELS[self] = build_kernel(self.module, self.func, self.transform)
        return _KERNELS[self]


def function_source(module: str, func: str, transform: Callable | None = None) -> str:
    """The text of ``func`` of ``specbound.kernels.<module>`` (undecorated), rewritten by ``transform``."""
    tree = ast.parse(open(kernel_files.kernel_path(module), encoding="utf-8").read())
    if transform is not None:
        tree = transform(tree)
        ast.fix_missing_locations(tree)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == func)
    fn.decorator_list = []
    return ast.unparse(fn) + "\n"


def build_kernel(module: str, func: str, transform: Callable | None = None):
    """``func`` of ``specbound.kernels.<module>``, the shipped kernel when ``transform`` is None,
    else its source rewritten by ``transform`` as a ``triton.jit`` function over a copy of the
    module's globals (the shipped kernel is untouched; the name is kept, since the checked
    interpreter records writes by kernel name)."""
    import importlib

    from specbound.kernels import source  # first: sets TRITON_INTERPRET before any @triton.jit

    mod = importlib.import_module(f"specbound.kernels.{module}")
    if transform is None:
        return getattr(mod, func)
    import triton

    text = function_source(module, func, transform)
    filename = f"<specbound planted {func}: {abs(hash(text)):x}>"
    ns = source.load(text, filename, dict(vars(mod)), flags=__future__.annotations.compiler_flag)
    return triton.jit(ns[func])


def kernel_of(module: str, func: str, plant: Plant | None = None):
    """The shipped kernel ``func`` of ``specbound.kernels.<module>``, or ``plant``'s version of it."""
    if plant is None:
        return build_kernel(module, func)
    if (plant.module, plant.func) != (module, func):
        raise ValueError(f"a plant in {plant.module}.{plant.func} cannot stand for {module}.{func}")
    return plant.kernel()


# --- the registry --------------------------------------------------------------------------------------

KIND_KERNEL = {"kv": ("draft_kv", "draft_kv_kernel"), "tree": ("tree_build", "build_tree_kernel"),
               "fill": ("tree_build", "fill_prefix_kernel")}

NO_SPEC_MODEL = ("no spec theorem has a mutant of this id (the fault lives in the kernel's code, not in a "
                 "size formula), so the fuzz has no counterexample to launch it on; its concrete replay is "
                 "the refutation's own")


@dataclass(frozen=True)
class KernelMutant:
    id: str
    description: str
    kind: str                       # "kv" | "tree" | "fill" (see KIND_KERNEL)
    prop: str                       # the property whose obligations refute it
    plant: Plant | None = None      # None: the kernel is untouched and ``host`` carries the bug
    host: dict = field(default_factory=dict, hash=False)
    expect: tuple = ("oob",)        # replay verdicts that reproduce the fault
    spec_override: Callable | None = None  # sp -> sp (e.g. a smaller lane bound)
    limits: dict = field(default_factory=dict, hash=False)
    content_box: dict = field(default_factory=dict, hash=False)  # tensor-content function -> (lo, hi)
    fuzz_theorem: str = ""          # the spec theorem whose counterexample the fuzz replays on the plant
    fuzz_skip: str = NO_SPEC_MODEL  # why the fuzz does not replay it (when fuzz_theorem is empty)

    @property
    def transform(self):
        return self.plant.transform if self.plant else None


def _swap(mid: str, description: str, kind: str, prop: str, old: str, new: str, expect=("output",), **kw):
    """A mutant that replaces one expression of the kind's kernel (``old`` -> ``new``)."""
    module, func = KIND_KERNEL[kind]
    return KernelMutant(mid, description, kind, prop, Plant(module, func, ((old, new),)), expect=expect, **kw)


def _plant(kind: str, replace=(), drop: str = "") -> Plant:
    return Plant(*KIND_KERNEL[kind], replace=tuple(replace), drop=drop)


MUTANTS = (
    # --- draft kv_indices ---
    _swap("MUT-KV-COPY-STOPS-EARLY",
          "the prefix copy loop stops one column block early (range(0, s_max - BLOCK_C, BLOCK_C)): the last "
          "block of every prefix is never copied, while every access stays in bounds (a truncated copy)",
          "kv", "NO-TRUNCATION", "range(0, s_max, BLOCK_C)", "range(0, s_max - BLOCK_C, BLOCK_C)"),
    KernelMutant("MUT-KV-TOKENS-INT32",
                 "req_to_token entries pass through int32 before the kv_indices store: a token slot >= 2^31 "
                 "wraps (an int32 wrap in a stored value; every offset stays in bounds)", "kv", "NO-WRAP",
                 _plant("kv", [("vals[:, None, :]", "vals.to(tl.int32)[:, None, :]")]),
                 host={"r2t_from_counterexample": True}, expect=("assert", "output"),
                 content_box={"req_to_token": (-2**40, 2**40)}),
    KernelMutant("MUT-27338-HOST-WIDTH-NO-TOPK",
                 "host sizes the kv_indices row num_seqs*C (topk factor dropped, sglang #27338) and skips the "
                 "capacity check", "kv", "IN-BOUNDS",
                 host={"width_hyp": lambda ns, k, c, d, w: w == ns * c, "room": True}, expect=("oob",)),
    _swap("MUT-KV-TAIL-NO-MASK",
          "prefix copy without the tail mask c < seq_len (the last column block copies past the prefix)",
          "kv", "IN-BOUNDS", "req_ok[:, None] & (c[None, :] < s2)", "req_ok[:, None]", expect=("oob", "output")),
    KernelMutant("MUT-KV-STEPS-LANES-BELOW-BATCH",
                 "STEPS lane bound smaller than num_steps, its device_assert removed: program 1 also writes "
                 "kv_indptr entry 0 (a race, not an out-of-bounds access)", "kv", "RACE-FREE",
                 _plant("kv", drop="device_assert(num_steps <= STEPS"),
                 host={"steps_lanes": lambda d, lanes: z3.And(lanes < d, d <= 2 * lanes)},
                 expect=("race",), limits={"num_steps": (1, 8), "num_seqs": (1, 4)}),
    _swap("MUT-KV-INDPTR-ENTRY-VALUE",
          "kv_indptr entry z = b*K + t + 1 stores P[b]*K + t*seq_len + z*iters (the branch's own prefix "
          "left out): every store stays in bounds, in its region and race free; only the footprint "
          "value (spec.kv_indptr_entry of spec.kv_positions_prefix) sees it", "kv", "FOOTPRINT",
          "(t2 + 1) * s2", "t2 * s2"),
    _swap("MUT-KV-EXTENSION-READ-STRIDE",
          "contiguous branches read their extension at seq_len + t*(num_steps - 1) + e: every read and "
          "store stays in bounds and every cell is the spec's, but branches share tokens; only the "
          "stored value (spec.kv_extension_read) sees it", "kv", "FOOTPRINT",
          "s2 + t2 * num_steps", "s2 + t2 * (num_steps - 1)"),
    # --- tree build ---
    KernelMutant("MUT-POSITIONS-INT32",
                 "positions computed in int32 (seq_len + depth): a request with seq_len + depth >= 2^31 gets a "
                 "negative position, while every offset stays int64 and in bounds (an int32 wrap); replayed "
                 "in the QLEN_ONLY layout, whose mask does not grow with seq_len, where the interpreter's "
                 "int32 overflow check fires (compiled, the position would silently wrap)", "tree", "NO-WRAP",
                 _plant("tree", [("s2 + depth", "s2.to(tl.int32) + depth.to(tl.int32)")]),
                 expect=("assert", "output"),
                 spec_override=lambda sp: models.TreeSpec(1, sp.DEPTH, sp.BLOCK_B, sp.NODES),
                 limits={"C": (1, 2**31 - 1)}, content_box={"seq_len": (0, 2**31 - 1), "P": (0, 2**33)}),
    KernelMutant("MUT-NODES-LANES-BELOW-N",
                 "NODES lane bound smaller than num_draft_tokens, its device_assert removed: nodes past NODES "
                 "get no mask row, position or links (a truncated tree; every access in bounds)", "tree",
                 "NO-TRUNCATION", _plant("tree", drop="device_assert(n <= NODES"),
                 host={"nodes_lanes": lambda n, lanes: z3.And(lanes < n, n <= 2 * lanes)},
                 expect=("output",), limits={"n": (1, 16)}),
    _swap("MUT-TREE-PROGRAM-STRIDE",
          "program p starts at request p*(BLOCK_B - 1): neighbouring programs both build the request between "
          "them (a race) and the last request may be left out", "tree", "RACE-FREE",
          "pid.to(tl.int64) * BLOCK_B", "pid.to(tl.int64) * (BLOCK_B - 1)", expect=("race", "output")),
    _swap("MUT-UNBOUNDED-WALK",
          "the root-ward walk runs DEPTH + 1 steps (bound larger than D): a cycle pushes depth past D", "tree", "WALK-BOUNDED",
          "tl.static_range(DEPTH)", "tl.static_range(DEPTH + 1)", fuzz_theorem="VM-WALK-BOUNDED", fuzz_skip=""),
    _swap("MUT-SEARCH-PAST-ROW",
          "parent search scans n entries of the (n-1)-entry selected_index row (sglang's CUDA kernel)",
          "tree", "IN-BOUNDS", "node2 < sel_width", "node2 < n", expect=("oob",), fuzz_theorem="VM-WALK-CONFINED",
          fuzz_skip=""),
    _swap("MUT-MASK-ROW-STRIDE",
          "FULL_MASK tree columns stored with row stride seq_len + n - 1 instead of spec.mask_row_width "
          "(seq_len + n): every cell stays inside its request's region (so in bounds and race free), but "
          "rows overlap and the last cells are never written; only the footprint obligation sees it",
          "tree", "FOOTPRINT", "(s3 + n) * t3", "(s3 + n - 1) * t3"),
    # --- prefix fill ---
    _swap("MUT-FILL-STOPS-EARLY",
          "the fill loop stops one column block early (range(0, s_max - BLOCK_C, BLOCK_C)): the last block of "
          "every prefix row stays unfilled, every store in bounds (a truncated fill)", "fill", "NO-TRUNCATION",
          "range(0, s_max, BLOCK_C)", "range(0, s_max - BLOCK_C, BLOCK_C)"),
    _swap("MUT-FILL-PROGRAM-STRIDE",
          "program p starts at request p*(BLOCK_B - 1): neighbouring programs both fill the request between "
          "them (a race)", "fill", "RACE-FREE",
          "pid.to(tl.int64) * BLOCK_B", "pid.to(tl.int64) * (BLOCK_B - 1)", expect=("race", "output")),
    _swap("MUT-FILL-TAIL-NO-MASK",
          "prefix fill without the tail mask c < seq_len (the last column block writes past the row)",
          "fill", "IN-BOUNDS", "row_ok & (c < s3)", "row_ok", expect=("oob",)),
    _swap("MUT-FILL-TAIL-SHORT",
          "prefix fill masked c < seq_len - 1 (the last prefix column of every row is never filled): every "
          "store is in bounds, in its region and its own cell, so only the completeness (coverage) "
          "obligation sees it", "fill", "FOOTPRINT", "row_ok & (c < s3)", "row_ok & (c < s3 - 1)"),
    _swap("MUT-FILL-STORES-FALSE",
          "prefix fill stores False: exactly the spec's cells, in bounds and race free, but every draft "
          "token would be masked from its own prefix; only the stored value sees it", "fill", "FOOTPRINT",
          "tl.full([BLOCK_B, NODES, BLOCK_C], 1, tl.int1)", "tl.full([BLOCK_B, NODES, BLOCK_C], 0, tl.int1)"),
)

BY_ID = {m.id: m for m in MUTANTS}
assert len(BY_ID) == len(MUTANTS), "duplicate kernel mutant id"
assert all(bool(m.fuzz_theorem) != bool(m.fuzz_skip) for m in MUTANTS), "a fuzz replay or the reason there is none"


def of_kind(kind: str) -> tuple:
    """The registered mutants of one kernel, in registry order (read at call time)."""
    return tuple(m for m in BY_ID.values() if m.kind == kind)


def get(mutant_id: str) -> KernelMutant:
    try:
        return BY_ID[mutant_id]
    except KeyError:
        raise KeyError(f"unknown kernel mutant {mutant_id!r}; registered: {', '.join(BY_ID)}") from None


def fuzzed() -> dict:
    """``{spec theorem id: [kernel mutant, ...]}`` for the mutants the fuzz replays."""
    out: dict = {}
    for m in BY_ID.values():
        if m.fuzz_theorem:
            out.setdefault(m.fuzz_theorem, []).append(m)
    return out
