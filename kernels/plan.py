"""One launch plan per kernel: the grid, the arguments by parameter name and the constexprs
of ``build_tree_kernel`` (:func:`tree_plan`), ``fill_prefix_kernel`` (:func:`fill_plan`) and
``draft_kv_kernel`` (:func:`kv_plan`).

Every size is computed through ``spec`` functions, so the same plan evaluates on ints (the
launch wrappers, the replays, the self-check tests) and on Z3 terms (the symbolic host
contract of ``proofs/symexec/models.py``): a change to a wrapper's grid or argument list is a
change the proofs see.  This module imports only ``spec`` (no torch, no triton), so the
symbolic proofs read it without the kernels.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from specbound import spec


@dataclass(frozen=True)
class LaunchPlan:
    grid: tuple        # programs per grid axis
    args: dict         # kernel parameter name -> tensor or runtime scalar
    constexprs: dict   # constexpr parameter name -> value

    def launch(self, kernel) -> None:
        """``kernel[grid](**args, **constexprs)``: arguments bind by name, so a plan whose
        names drift from the kernel's parameters fails at the launch, not silently."""
        kernel[self.grid](**self.args, **self.constexprs)


def tensor_args(names: tuple, tensors: dict) -> dict:
    """The pointer arguments ``names`` from ``tensors`` (keyed by parameter name), in order;
    a missing one is named."""
    missing = [n for n in names if n not in tensors]
    if missing:
        raise KeyError(f"launch plan: no tensor for kernel parameter(s) {', '.join(missing)}")
    return {n: tensors[n] for n in names}


TREE_TENSORS = ("parent_list_ptr", "selected_index_ptr", "seq_lens_ptr", "prefix_ptr", "tree_mask_ptr",
                "positions_ptr", "retrive_index_ptr", "next_token_ptr", "next_sibling_ptr")
FILL_TENSORS = ("tree_mask_ptr", "seq_lens_ptr", "prefix_ptr")


def tree_plan(tensors: dict, *, bs, topk, depth, n, mode, block_b: int, nodes: int) -> LaunchPlan:
    """``build_tree_kernel``'s launch: one program per ``block_b`` requests; the row widths and
    the walk bound from the spec."""
    return LaunchPlan(
        grid=(spec.cdiv(bs, block_b),),
        args={**tensor_args(TREE_TENSORS, tensors), "bs": bs, "topk": topk,
              "pl_width": spec.parent_list_width(topk, depth), "sel_width": spec.selected_index_width(n), "n": n},
        constexprs={"MODE": int(mode), "DEPTH": spec.walk_max_steps(depth), "BLOCK_B": block_b, "NODES": nodes})


def fill_plan(tensors: dict, *, bs, n, block_b: int, nodes: int, block_c: int) -> LaunchPlan:
    """``fill_prefix_kernel``'s launch: one program per ``block_b`` requests."""
    return LaunchPlan(grid=(spec.cdiv(bs, block_b),), args={**tensor_args(FILL_TENSORS, tensors), "bs": bs, "n": n},
                      constexprs={"BLOCK_B": block_b, "NODES": nodes, "BLOCK_C": block_c})


KV_TENSORS = ("req_pool_indices_ptr", "req_to_token_ptr", "seq_lens_ptr", "prefix_ptr", "kv_indices_ptr",
              "kv_indptr_ptr")


def kv_plan(tensors: dict, *, num_seqs, topk, num_steps, page_size, width, indptr_stride, r2t_stride0,
            r2t_stride1, block_b: int, pairs: int, steps: int, block_c: int) -> LaunchPlan:
    """``draft_kv_kernel``'s launch: one program per ``block_b`` requests; ``width`` and
    ``indptr_stride`` are the row widths of kv_indices and kv_indptr, ``r2t_stride*``
    req_to_token's strides."""
    return LaunchPlan(
        grid=(spec.cdiv(num_seqs, block_b),),
        args={**tensor_args(KV_TENSORS, tensors), "num_seqs": num_seqs, "topk": topk, "num_steps": num_steps,
              "page_size": page_size, "width": width, "indptr_stride": indptr_stride,
              "r2t_stride0": r2t_stride0, "r2t_stride1": r2t_stride1},
        constexprs={"BLOCK_B": block_b, "PAIRS": pairs, "STEPS": steps, "BLOCK_C": block_c})


# --- block choosers: the constexprs a launch picks ------------------------------------------------
# Pure functions of the batch shape and of whether the kernels run compiled or interpreted, so
# that the envelope below, the verifiers and the tests evaluate exactly what a GPU or an
# interpreted launch picks; the wrappers call these same functions.

# Elements per tile, (compiled, interpreted).  Interpreted, the cost is per program and per op,
# so tiles are large; compiled, a tile lives in registers, so it stays small.
BUDGETS = {
    "kv": (4096, 1 << 20),       # draft kv: (request x pair x column) tile of the prefix copy
    "tree": (2048, 8192),        # tree build: (request x node x node) tile
    "fill": (4096, 1 << 18),     # prefix fill: (request x row x column) tile
}
# BLOCK_C, the column lanes of a copy loop: one value per kernel, compiled or interpreted, so
# the CPU runs exercise the very column loop a GPU runs.
BLOCK_C = {"kv": 128, "fill": 256}
# The most requests one program takes, in either mode: a power of two, the envelope's largest
# batch rounded up.  One symbolic proof covers every BLOCK_B up to it (symbolic_block_b_values).
BLOCK_B_MAX = 256


def budget(kernel: str, compiled: bool) -> int:
    """The default tile budget of ``kernel`` ("kv", "tree", "fill")."""
    return BUDGETS[kernel][0 if compiled else 1]


def pow2(x: int) -> int:
    """The least power of two >= x (1 for x <= 1)."""
    return 1 << max(0, int(x) - 1).bit_length()


# Only BLOCK_B depends on the mode.  Compiled, it depends on neither the batch size nor the
# context; interpreted, a tile's cost is per element, so it follows pow2(batch) (small tests
# stay fast).  Every other constexpr is the same function of (topk, num_steps, n) in both
# modes, so one proof with BLOCK_B symbolic (every power of two up to BLOCK_B_MAX) covers a
# specialization's GPU launch and all its interpreted ones: "proved" means "what runs", on
# either.


def _block_b(budget_: int, tile: int, batch: int, compiled: bool) -> int:
    """The largest power of two b with b * tile <= budget (at least 1, at most BLOCK_B_MAX);
    interpreted, also capped by pow2(batch)."""
    fit = max(1, budget_ // tile)
    widest = min(pow2(fit + 1) // 2, BLOCK_B_MAX)   # the power of two just above fit, halved
    return widest if compiled else min(widest, pow2(max(batch, 1)))


def kv_blocks(num_seqs: int, topk: int, num_steps: int, *, compiled: bool,
              tile_budget: int | None = None) -> tuple[int, int, int, int]:
    """(BLOCK_B, PAIRS, STEPS, BLOCK_C) of ``draft_kv_kernel`` for a batch.  PAIRS =
    pow2(num_steps * topk), STEPS = pow2(num_steps), BLOCK_C fixed; BLOCK_B follows
    pow2(num_seqs) when interpreted and nothing of the batch when compiled."""
    pairs, steps = pow2(num_steps * topk), pow2(num_steps)
    block_c = BLOCK_C["kv"]
    block_b = _block_b(tile_budget or budget("kv", compiled), pairs * block_c, num_seqs, compiled)
    return block_b, pairs, steps, block_c


def tree_blocks(bs: int, n: int, *, compiled: bool, tile_budget: int | None = None) -> tuple[int, int]:
    """(BLOCK_B, NODES) of ``build_tree_kernel``: NODES = pow2(n); BLOCK_B the largest power
    of two with BLOCK_B * NODES^2 <= budget (interpreted, capped by pow2(bs))."""
    nodes = pow2(max(n, 1))
    return _block_b(tile_budget or budget("tree", compiled), nodes * nodes, bs, compiled), nodes


def fill_blocks(bs: int, nodes: int, *, compiled: bool, tile_budget: int | None = None) -> tuple[int, int]:
    """(BLOCK_B, BLOCK_C) of ``fill_prefix_kernel`` (``nodes``: the tree build's NODES)."""
    block_c = BLOCK_C["fill"]
    return _block_b(tile_budget or budget("fill", compiled), nodes * block_c, bs, compiled), block_c


# --- specializations: the names the proofs give them ----------------------------------------------

TREE_MODE_NAMES = {0: "FULL", 1: "QLEN", 2: "BITPACK"}   # spec.TreeMaskMode values
KV_DTYPE_KEYS = ("INDICES", "INDPTR")                      # kv_indices / kv_indptr element types


def specialization(kernel: str, constexprs: dict) -> tuple[str, str]:
    """``(name, label)`` of a launch of ``kernel`` (its @triton.jit name) with ``constexprs``
    (for ``draft_kv_kernel`` also the output dtype names under INDICES / INDPTR, which Triton
    specializes on too): the kernel theorems' ids are ``KERNEL-<name>-<PROPERTY>[<label>]``."""
    c = constexprs
    try:
        if kernel == "draft_kv_kernel":
            return "KV", (f"BLOCK_B={c['BLOCK_B']},PAIRS={c['PAIRS']},STEPS={c['STEPS']},BLOCK_C={c['BLOCK_C']},"
                          f"INDICES={c['INDICES']},INDPTR={c['INDPTR']}")
        if kernel == "build_tree_kernel":
            return (f"BUILD-TREE-{TREE_MODE_NAMES[int(c['MODE'])]}",
                    f"NODES={c['NODES']},DEPTH={c['DEPTH']},BLOCK_B={c['BLOCK_B']}")
        if kernel == "fill_prefix_kernel":
            return "FILL-PREFIX", f"BLOCK_B={c['BLOCK_B']},NODES={c['NODES']},BLOCK_C={c['BLOCK_C']}"
    except KeyError as exc:
        raise KeyError(f"specialization: constexprs of {kernel} lack {exc.args[0]!r} (got {sorted(c)})") from None
    raise KeyError(f"specialization: unknown kernel {kernel!r} (draft_kv_kernel, build_tree_kernel, "
                   f"fill_prefix_kernel)")


# --- the serving envelope -------------------------------------------------------------------------

@dataclass(frozen=True)
class Envelope:
    """The batches serving launches, inclusive ranges.  ``num_steps`` is also the draft tree's
    depth D; a tree's (topk, D, n) must satisfy ``spec.tree_shape_ok``, and BITPACKING holds
    at most ``spec.BITPACK_MAX_DRAFT_TOKENS`` draft tokens.  ``max_seq_len`` and ``page_size`` are
    part of the envelope but no chooser reads them.
    The outputs' dtypes are the wrappers' (``spec.KV_DTYPES`` for kv_indices / kv_indptr, an
    int32 kv_indices only beside an int32 req_to_token; the tree's are fixed by its mode)."""
    batch: tuple = (1, 256)
    topk: tuple = (1, 8)
    num_steps: tuple = (1, 8)
    max_seq_len: tuple = (0, 1 << 20)
    page_size: tuple = (1, 64)
    num_draft_tokens: tuple = (1, 64)


ENVELOPE = Envelope()
KERNELS = ("draft_kv_kernel", "build_tree_kernel", "fill_prefix_kernel")


def pow2_buckets(lo: int, hi: int) -> list[int]:
    """One representative per value of ``pow2(x)`` over ``lo <= x <= hi``: that map is
    monotone and takes exactly the powers of two from pow2(lo) to pow2(hi), each attained at
    itself (or at lo for the first; at hi for the last)."""
    first, last = pow2(lo), pow2(hi)
    reps, p = [], first
    while p <= last:
        reps.append(min(max(p, lo), hi))
        p *= 2
    return reps


def _range(bounds: tuple) -> range:
    return range(bounds[0], bounds[1] + 1)


def envelope_specializations(kernel: str, *, compiled: bool, env: Envelope = ENVELOPE) -> dict:
    """Every specialization the block choosers pick for ``kernel`` over ``env``:
    ``{(name, label): {"constexprs": ..., "example": the first batch shape picking it}}``.

    Exact, not sampled: each chooser reads the batch size only through ``pow2`` buckets (see
    the choosers), so one representative per bucket (:func:`pow2_buckets`) reaches every value
    they return; topk, num_steps and n are enumerated whole; BITPACKING only up to
    ``spec.BITPACK_MAX_DRAFT_TOKENS``.  The tests compare this against the choosers on every
    batch size."""
    out: dict = {}
    batches = pow2_buckets(*env.batch)
    steps_range, topk_range = _range(env.num_steps), _range(env.topk)

    def add(constexprs, example):
        out.setdefault(specialization(kernel, constexprs), {"constexprs": constexprs, "example": example})

    if kernel == "draft_kv_kernel":
        for d in steps_range:
            for k in topk_range:
                for bs in batches:
                    bb, pairs, st, bc = kv_blocks(bs, k, d, compiled=compiled)
                    for indices in spec.KV_DTYPES:
                        for indptr in spec.KV_DTYPES:
                            add({"BLOCK_B": bb, "PAIRS": pairs, "STEPS": st, "BLOCK_C": bc, "INDICES": indices,
                                 "INDPTR": indptr}, {"batch": bs, "topk": k, "num_steps": d})
        return out
    if kernel not in KERNELS:
        specialization(kernel, {})   # names the unknown kernel
    for d in steps_range:
        for n in _range(env.num_draft_tokens):
            if not any(spec.conjunction(spec.tree_shape_ok(k, d, n)) for k in topk_range):
                continue
            for bs in batches:
                bb, nodes = tree_blocks(bs, n, compiled=compiled)
                example = {"batch": bs, "num_steps": d, "num_draft_tokens": n}
                if kernel == "build_tree_kernel":
                    for mode in TREE_MODE_NAMES:
                        if mode != 2 or n <= spec.BITPACK_MAX_DRAFT_TOKENS:
                            add({"MODE": mode, "DEPTH": spec.walk_max_steps(d), "BLOCK_B": bb, "NODES": nodes},
                                {**example, "mode": TREE_MODE_NAMES[mode]})
                    continue
                fb, fc = fill_blocks(bs, nodes, compiled=compiled)   # the prefix fill (FULL_MASK)
                add({"BLOCK_B": fb, "NODES": nodes, "BLOCK_C": fc}, example)
    return out


@functools.lru_cache(maxsize=None)
def envelope_cached(kernel: str, compiled: bool) -> dict:
    """:func:`envelope_specializations` of :data:`ENVELOPE`, computed once (do not modify it)."""
    return envelope_specializations(kernel, compiled=compiled)


# Typical EAGLE configurations (topk, num_steps, num_draft_tokens): a chain, and the wider trees
# sglang's documentation shows (the sglang envelope report counts its launches at these too).
TYPICAL_CONFIGS = ((1, 3, 4), (4, 3, 16), (8, 5, 32))


def proof_selection(kernel: str) -> dict:
    """The specializations ``specbound prove --kernels --all`` proves for the envelope, as
    :func:`envelope_specializations` returns them but with BLOCK_B symbolic (``None`` in
    ``constexprs``; its label :func:`symbolic_block_b_label`): one per other constexprs of a
    compiled or interpreted launch, each covering every BLOCK_B the choosers can pick
    (:func:`covered_by_proof`), so together they cover the whole envelope in both modes."""
    out: dict = {}
    for compiled in (True, False):
        for entry in envelope_cached(kernel, compiled).values():
            c = {**entry["constexprs"], "BLOCK_B": None}
            key = specialization(kernel, {**c, "BLOCK_B": symbolic_block_b_label()})
            out.setdefault(key, {"constexprs": c, "example": entry["example"]})
    return out


# --- which specializations are proved --------------------------------------------------------------

def manifest_path() -> str:
    """``proofs/manifest.json`` of the installed specbound, found without importing the proofs."""
    import importlib.util
    import os

    found = importlib.util.find_spec("specbound.proofs")
    if found is None or not found.submodule_search_locations:
        raise FileNotFoundError("specbound.proofs is not installed: no proofs/manifest.json to read")
    return os.path.join(list(found.submodule_search_locations)[0], "manifest.json")


# Read by proved_specializations(); tests point it at a manifest of their own.
MANIFEST_PATH: str | None = None
_PROVED_CACHE: dict = {}


def proved_in(manifest: dict) -> frozenset:
    """``{(name, label)}`` of every kernel specialization whose theorems ``manifest`` records,
    all ``proved`` (the manifest is regenerated only from a complete ``specbound prove
    --kernels --all`` run, so an entry there was proved)."""
    verdicts: dict = {}
    for e in manifest.get("kernel_theorems", {}).values():
        verdicts.setdefault((e["kernel"], e["specialization"]), set()).add(e["verdict"])
    return frozenset(key for key, seen in verdicts.items() if seen == {"proved"})


def proved_specializations(path: str | None = None) -> frozenset:
    """:func:`proved_in` of the manifest at ``path`` (default :data:`MANIFEST_PATH`, else the
    installed ``proofs/manifest.json``), read once per path."""
    import json

    path = path or MANIFEST_PATH or manifest_path()
    if path not in _PROVED_CACHE:
        with open(path, encoding="utf-8") as fh:
            _PROVED_CACHE[path] = proved_in(json.load(fh))
    return _PROVED_CACHE[path]


def symbolic_block_b_values() -> list[int]:
    """The BLOCK_B values one symbolic proof covers (its label's ``BLOCK_B=2^0..2^k``): every
    power of two up to :data:`BLOCK_B_MAX`, so every value a chooser can return."""
    return [1 << i for i in range(BLOCK_B_MAX.bit_length())]


def symbolic_block_b_label() -> str:
    """BLOCK_B's part of a symbolic specialization's label: ``2^0..2^k``."""
    return f"2^0..2^{len(symbolic_block_b_values()) - 1}"


def covered_by_proof(kernel: str, constexprs: dict, proved: frozenset) -> bool:
    """Whether ``proved`` holds the specialization itself, or the symbolic one (same other
    constexprs, BLOCK_B every value of :func:`symbolic_block_b_values`) that covers it."""
    if specialization(kernel, constexprs) in proved:
        return True
    return (constexprs.get("BLOCK_B") in symbolic_block_b_values()
            and specialization(kernel, {**constexprs, "BLOCK_B": symbolic_block_b_label()}) in proved)


def proved_specialization(kernel: str, constexprs: dict) -> bool:
    """Whether the launch of ``kernel`` with ``constexprs`` (see :func:`specialization`) is one
    whose kernel theorems are proved (:func:`proved_specializations`), itself or through a
    symbolic BLOCK_B proof that covers it."""
    return covered_by_proof(kernel, constexprs, proved_specializations())


class UnprovedSpecialization(RuntimeError):
    """``require_proved=True`` and the launch's specialization is not a proved one."""

    def __init__(self, kernel: str, constexprs: dict, why: str):
        name, label = specialization(kernel, constexprs)
        self.kernel, self.constexprs = kernel, dict(constexprs)
        super().__init__(
            f"require_proved=True: {kernel} would launch the specialization {name}[{label}] ({why}), "
            f"which is not among the proved specializations of proofs/manifest.json; nothing was "
            f"written.  Prove it (add it to its verifier's all_specs, run `specbound prove --kernels --all`) "
            f"or launch without require_proved")


def require_proved(launches: list, why: str) -> None:
    """Refuse (:class:`UnprovedSpecialization`) when any ``(kernel, constexprs)`` of a wrapper's
    launches is not proved; checked before the first launch, so a refusal writes nothing."""
    for kernel, constexprs in launches:
        if not proved_specialization(kernel, constexprs):
            raise UnprovedSpecialization(kernel, constexprs, why)


def envelope_coverage(proved: frozenset | None = None) -> list[dict]:
    """Per kernel and mode (compiled, then interpreted): the envelope's specializations, how many
    are ``proved`` (default: :func:`proved_specializations`), and the ``unproved`` ones."""
    proved = proved_specializations() if proved is None else proved
    rows = []
    for kernel in KERNELS:
        for compiled in (True, False):
            chosen = envelope_cached(kernel, compiled)
            unproved = sorted(key for key, e in chosen.items() if not covered_by_proof(kernel, e["constexprs"], proved))
            rows.append({"kernel": kernel, "compiled": compiled, "total": len(chosen),
                         "proved": len(chosen) - len(unproved), "unproved": unproved})
    return rows
