"""sglang's draft-decode kernel ``generate_draft_decode_kv_indices``: its launch model, host
contract, specializations and obligations.

The kernel is read from sglang's source file by path (never imported).  One program per
(step row, request, branch) — grid ``(num_steps * blocks, num_seqs, topk)``; with
``NUM_STEPS > 0`` the prefix copy of a branch is split over ``blocks`` token-block programs
(``range(blk, num_loop, num_blk)``) and block 0 alone writes the extension and ``kv_indptr``.

**Host contract** (from sglang's launch sites: ``FlashInferMultiStepDraftBackend`` and the
Triton/aiter/MLA backends' ``common_template``; every fact below names its source).  What
the launch sites establish by construction (the grid, ``kv_indices_stride`` = the sizing's
width, the ``kv_indptr`` row width, a non-empty request pool, ``num_seqs >= 1``) enters as a
launch-contract axiom of the core; the rest are declared preconditions (hypotheses), a
per-request or per-entry one as a single quantified hypothesis (:func:`preconditions`):

* grid ``(G0, num_seqs, K)`` with ``G0 = num_steps`` (``NUM_STEPS = 0``) or
  ``G0 = NUM_STEPS * blocks``, ``blocks >= 1`` (``NUM_STEPS = num_steps``);
* ``kv_indices`` is ``(num_steps, width)`` with ``width`` from sglang's sizing
  (``draft_kv_indices_buffer_width(alloc_bs, K, C)``, ``alloc_bs = batch`` (eager) or
  ``max_bs >= num_seqs`` (CUDA graph); its own assert keeps it below 2^31), passed as the
  constexpr ``kv_indices_stride``;  a caller may supply the width as a Z3 term (the audit
  runs sglang's own helper on Z3 terms; allocation tracing can supply any extent);
* ``kv_indptr`` is ``(num_steps, stride)`` with ``stride >= num_seqs*K + 1``, zero-filled
  (entry 0 is never written);
* ``positions[z] = seq_len[z div K]`` for the ``num_seqs*K`` branches;
* ``req_to_token`` rows of ``row_stride`` slots, each request's row at least
  ``spec.kv_req_to_token_span`` wide (the prefix and every branch's extension);
* the lane bounds are next powers of two: ``num_seqs <= bs_upper``,
  ``num_steps <= iter_upper``, ``num_seqs*K <= num_tokens_upper``; given as None in a
  :class:`KvSpec` they are symbolic (each a ``tl.arange`` length, executor lanes
  ``0 <= lane < bound``), with the precondition ``bs_upper in {1,2,4,...,256}`` (the powers of
  two up to the envelope's largest, :data:`LANE_BOUND_MAX`): one proof for all of them;
* ``window_size = sink_size = 0``, ``ENTRY_PAGE_SIZE = 1``, no ``v2p`` (the pristine read
  plan; the windowed and translated paths run in the executor but the spec has no model of
  their output, so they are not proved).

**Preconditions sglang does not check** (``UNCHECKED``, each refuted by a replay on
sglang's kernel when left out): draft room, ``seq_len[b] + num_steps <= C``
(``spec.draft_room_ok``: the scheduler keeps it, no launch site asserts it; flashinfer's
``assert_buffer_fits`` checks its batch-total consequence, the Triton backend nothing), and
int32 row offsets, ``(num_steps - 1) * stride < 2^31`` for both buffers
(``spec.int32_row_offsets_ok``: the kernel multiplies the constexpr stride by the program id
in int32; sglang asserts only ``width < 2^31``).

The launch layout and the kernel's symbols: :mod:`.draft_kv_layout`; obligations:
:mod:`.sglang_draft_kv_obligations`; replays: :func:`replay`, launched by
:func:`specbound.engines.sglang.launch.draft_kv`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from dataclasses import replace as dc_replace
from typing import Callable

import z3

from specbound import spec
from specbound.proofs import core as proof_core
from specbound.proofs import lemmas as spec_lemmas
from specbound.proofs import model
from specbound.proofs.model import C, D, K, P, Q, labelled, num_seqs, page, seq_len

from specbound.proofs.symexec import lemmas as symexec_lemmas
from specbound.proofs.symexec.interp import Executor
from specbound.proofs.symexec.kernel_files import torch_free_module
from specbound.proofs.symexec.models import Run, content_preconditions, launch_contracts, mul_mono, prefix_schema, register_function, seq_len_schema, make_oracle
from specbound.proofs.symexec.engine_theorems import prove as prove_run
from specbound.proofs.symexec.engine_theorems import refute
from .draft_kv_layout import (  # noqa: F401  (the kernel's symbols, read as sglang_draft_kv.width etc.)
    G0, LANE_BOUNDS, SCOPED, SPEC_TERMS, alloc_bs, block_of, blocks, indptr_stride, iters_of, lane_bound_term, pool_rows, r2t_width, spec_hyps, width,
)
from .draft_kv_obligations import obligations
from specbound.proofs.symexec.values import DTYPES, INT32, INT64, LANES, V, TensorModel, Unsupported

from specbound.engines.sglang.launch import KV_KERNEL as KERNEL  # the one name of the kernel
from specbound.engines.sglang import launch as sglang
from specbound.replay import load_kernel
SOURCE = "kernels/ops/speculative/cache_locs.py"   # inside the sglang package (0.5.23)


# The lane bounds' largest values over the serving envelope (kernels/plan.py): a lane bound
# given as None is symbolic, one proof for every power of two up to its largest value.
_PLAN = torch_free_module("plan")
_ENV = _PLAN.ENVELOPE
LANE_BOUND_MAX = {"bs_upper": _PLAN.pow2(_ENV.batch[1]), "iter_upper": _PLAN.pow2(_ENV.num_steps[1]),
                  "num_tokens_upper": _PLAN.pow2(_ENV.batch[1] * _ENV.topk[1])}
ENVELOPE_MAX_STEPS = _ENV.num_steps[1]   # NUM_STEPS = num_steps takes 1..this in the envelope


def lane_bound_values(name: str) -> list[int]:
    """The values a symbolic lane bound covers: the powers of two up to its largest."""
    return [1 << i for i in range(LANE_BOUND_MAX[name].bit_length())]


@dataclass(frozen=True)
class KvSpec:
    """One constexpr specialization sglang launches, or (a lane bound None) every value of
    that lane bound at once."""

    NUM_STEPS: int          # 0: grid (num_steps, ...); N > 0: N steps, token blocks on axis 0
    paged: bool             # False: page_size == 1; True: any page_size >= 2 (symbolic)
    bs_upper: int | None = None          # None: symbolic, every power of two up to LANE_BOUND_MAX
    iter_upper: int | None = None
    num_tokens_upper: int | None = None
    seq_lens_dtype: str = "int64"
    name = "SGLANG-DRAFT-KV"   # the kernel part of its theorem ids

    @property
    def label(self):
        page_ = "page>1" if self.paged else "page=1"
        bounds = ",".join(f"{n}={self.bound_label(n)}" for n in LANE_BOUNDS)
        return f"NUM_STEPS={self.NUM_STEPS},{page_},{bounds},seq_lens={self.seq_lens_dtype}"

    def bound_label(self, name: str) -> str:
        """``8`` (that value) or ``2^0..2^8`` (symbolic: every power of two of the range)."""
        v = getattr(self, name)
        return str(v) if v is not None else f"2^0..2^{LANE_BOUND_MAX[name].bit_length() - 1}"

    def covers(self, other: KvSpec) -> bool:
        """Whether every kernel ``other`` (a concrete specialization) stands for is one of
        this proof's: the same NUM_STEPS, page case and dtype, each lane bound equal or among
        this one's symbolic values."""
        if (self.NUM_STEPS, self.paged, self.seq_lens_dtype) != (other.NUM_STEPS, other.paged, other.seq_lens_dtype):
            return False
        for name in LANE_BOUNDS:
            mine, theirs = getattr(self, name), getattr(other, name)
            if theirs is None or not (theirs == mine if mine is not None else theirs in lane_bound_values(name)):
                return False
        return True

    @classmethod
    def from_label(cls, label: str) -> KvSpec:
        """The specialization a :attr:`label` names (its inverse)."""
        f = dict(part.split("=", 1) if "=" in part else (part.split(">")[0], ">") for part in label.split(","))
        bounds = {n: (None if ".." in f[n] else int(f[n])) for n in LANE_BOUNDS}
        sp = cls(int(f["NUM_STEPS"]), f["page"] == ">", **bounds, seq_lens_dtype=f["seq_lens"])
        if sp.label != label:
            raise ValueError(f"label {label!r} is not a draft kv specialization's (reads back as {sp.label!r})")
        return sp


def kernel_params(path: str) -> list:
    """The kernel's parameter names, read from its source."""
    import ast

    tree = ast.parse(open(path, encoding="utf-8").read())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == KERNEL:
            return [a.arg for a in node.args.args]
    raise Unsupported(f"no function {KERNEL} in {path}")


def default_width(alloc, k, c):
    """sglang's sizing as the spec states it: ``draft_kv_indices_buffer_width``, with the
    helper's own ``< 2^31`` assert as its path condition."""
    w = spec.draft_kv_indices_buffer_width(alloc, k, c)
    return w, labelled(spec.int32_alloc_ok(w, "kv_indices row width"))


@dataclass
class Host:
    """What the launch sites supply, replaceable from outside (the seam for the audit and
    for allocation tracing): ``width_fn(alloc_bs, K, C) -> (term, {label: condition})``,
    ``extents`` (tensor name -> Z3 numel overriding the model's), ``drop`` (preconditions
    left out, to refute them)."""

    width_fn: Callable = default_width
    extents: dict = field(default_factory=dict)
    drop: tuple = ()
    # the read-plan constexprs (window_size, sink_size, ENTRY_PAGE_SIZE, TRANSLATE): only their
    # identity settings are proved (the spec has no model of the others); the executor runs
    # any, for the checks against the interpreter
    paths: dict = field(default_factory=dict)


def _positions_schema(app):
    """The positions prefix ``Q``: its definition (the axioms ``positions_zero`` and, at this
    index, ``positions_step``)."""
    return {"positions_zero": model.POSITIONS_ZERO, "positions_step": model.positions_at(app.arg(0))}


def preconditions(sp: KvSpec, host: Host) -> tuple[dict, dict]:
    """The host contract: (hypotheses, launch contracts).  Hypotheses are the declared
    preconditions; a per-request one is a single quantified hypothesis (``model.per_request``),
    used at a request only through the core's instance.  Launch contracts are what sglang's
    launch sites establish by construction: ``name -> (formula, reason)``, core axioms."""
    hyps = labelled(spec.kv_shape_ok(K, D, page))
    hyps.update(labelled(spec.context_ok(C)))
    hyps.update(model.per_request(model.seq_len_conds, model.draft_room_conds, size=num_seqs))
    w_term, w_hyps = host.width_fn(alloc_bs, K, C)
    hyps.update(w_hyps)
    hyps["!sizing"] = tuple(w_hyps)   # (names of the sizing's own conditions; removed below)
    hyps["sized_for_the_batch"] = num_seqs <= alloc_bs
    # not checked by sglang: each row's offset kv_indices_stride * iters is an int32 product
    # (kept apart: only the queries that mention the stride get it, see ``obligations``)
    for stride, name in ((width, "kv_indices_stride"), (indptr_stride, "kv_indptr_stride")):
        hyps.update({f"{label}{SCOPED}": cond for label, cond in
                     labelled(spec.int32_row_offsets_ok(D, stride, name)).items()})
    bs_d = spec.draft_branches(num_seqs, K)
    contracts = {
        "batch_nonempty": (num_seqs >= 1, "grid axis 1 is num_seqs: an empty batch launches no program"),
        "width_from_sizing": (width == w_term, "sglang's launch sites pass the kv_indices row width, the value "
                                               "of its sizing (draft_kv_indices_buffer_width), as kv_indices_stride"),
        "indptr_row_width": (indptr_stride >= bs_d + 1, "sglang allocates kv_indptr rows of (max_bs or bs) * topk "
                                                         "+ 1 entries and launches at most that many branches"),
        "req_to_token_pool": (z3.And(pool_rows >= 1, r2t_width >= 1),
                              "sglang passes req_to_token.shape[1] as row_stride of its non-empty request pool"),
    }
    if sp.NUM_STEPS == 0:
        contracts["grid0_is_num_steps"] = (G0 == D, "launched with grid (num_steps, num_seqs, topk) when "
                                                    "NUM_STEPS = 0")
    else:
        hyps["num_steps_is_NUM_STEPS"] = D == sp.NUM_STEPS
        contracts["grid0_is_steps_times_blocks"] = (
            z3.And(blocks >= 1, G0 == sp.NUM_STEPS * blocks),
            "the token-block launch uses grid (NUM_STEPS * blocks, num_seqs, topk), blocks >= 1")
    if not sp.paged:
        hyps["page_size_is_1"] = page == 1
    else:
        hyps["page_size_above_1"] = page >= 2
    for name, needed in (("bs_upper", num_seqs), ("iter_upper", D), ("num_tokens_upper", bs_d)):
        hyps.update(labelled(spec.lane_bound_ok(needed, lane_bound(sp, name), name)))
        if getattr(sp, name) is None:   # the values one symbolic proof covers, named in its label
            values = lane_bound_values(name)
            hyps[f"{name} in {{{','.join(map(str, values[:3]))},...,{values[-1]}}}"] = \
                z3.Or(*[lane_bound_term(name) == v for v in values])
    for name, term in (("grid0", G0), ("num_seqs", num_seqs), ("topk", K), ("row_stride", r2t_width),
                       ("page_size", page),
                       ("kv_indices_stride", width), ("kv_indptr_stride", indptr_stride),
                       ("max_context_len", C)):
        hyps.update(labelled(spec.int32_arg_ok(term, name)))
    for name in host.drop:
        hyps.pop(name, None)
        hyps.pop(name + SCOPED, None)
    return hyps, contracts


def lane_bound(sp: KvSpec, name: str):
    """The lane bound ``name`` of ``sp``: its int, or its Z3 term when symbolic."""
    v = getattr(sp, name)
    return lane_bound_term(name) if v is None else v


REQUESTS = ("seq_len_nonneg", "seq_len_le_context", "draft_room")   # instantiated at each seq_lens read


def run_kernel(sp: KvSpec, path: str, host: Host | None = None) -> Run:
    """Symbolic run of sglang's kernel at ``path`` under the host contract."""
    host = host or Host()
    hyps, contracts = preconditions(sp, host)
    sizing = hyps.pop("!sizing")
    axioms = launch_contracts(**contracts)
    functions: dict = {}
    pool_row = z3.Function("pool_row", z3.IntSort(), z3.IntSort())
    r2t = z3.Function("req_to_token", z3.IntSort(), z3.IntSort())
    # the row-span condition rides on the request's req_to_token row (pool_row), not on
    # seq_len: its paged span (div/mod by page_size) would otherwise enter every query
    row = {"req_to_token_row_covers_reads": lambda i, v: spec.kv_req_to_token_span(seq_len(i), K, D, page) <= r2t_width}
    row = {k: f for k, f in row.items() if k not in host.drop}
    hyps.update(content_preconditions(functions, pool_row, "pool_row_in_req_to_token",
                                      lambda i, v: z3.And(0 <= v, v < pool_rows), requests=num_seqs, **row))
    hyps.update(content_preconditions(functions, r2t, "req_to_token_int32", lambda i, v: z3.And(v >= INT32.lo(), v < INT32.hi())))
    register_function(functions, seq_len, seq_len_schema({k: hyps[k] for k in REQUESTS if k in hyps}))
    register_function(functions, P, prefix_schema(num_seqs))
    register_function(functions, Q, _positions_schema)
    seq_dt = DTYPES[sp.seq_lens_dtype]
    bs_d = spec.draft_branches(num_seqs, K)
    numel = {"kv_indices": D * width, "kv_indptr": D * indptr_stride, "req_to_token": pool_rows * r2t_width,
             "seq_lens": num_seqs, "positions": bs_d, "req_pool_indices": num_seqs}
    numel.update(host.extents)
    tensors = {
        "req_pool_indices": TensorModel("req_pool_indices", numel["req_pool_indices"], INT64, pool_row),
        "req_to_token": TensorModel("req_to_token", numel["req_to_token"], INT32, r2t),
        "paged_kernel_lens": TensorModel("seq_lens", numel["seq_lens"], seq_dt, seq_len,
                                         prefix=(P, prefix_schema(num_seqs))),
        "kv_indices": TensorModel("kv_indices", numel["kv_indices"], INT32, written=True),
        "kv_indptr": TensorModel("kv_indptr", numel["kv_indptr"], INT32, written=True),
        "positions": TensorModel("positions", numel["positions"], INT64, lambda z: seq_len(z / K),
                                 prefix=(Q, _positions_schema)),
    }
    params = kernel_params(path)
    if sp.NUM_STEPS and "NUM_STEPS" not in params:
        raise Unsupported(f"specialization NUM_STEPS={sp.NUM_STEPS}: this release's kernel has no token-block "
                          "launch (no NUM_STEPS parameter)")
    # the req_to_token row stride: a runtime argument (0.5.23) or the constexpr pool_len (older releases)
    scalars = {"row_stride": V(r2t_width, (), INT32)}
    constexprs = {"pool_len": V(r2t_width, (), INT32),
                  "kv_indices_stride": V(width, (), INT32), "kv_indptr_stride": V(indptr_stride, (), INT32),
                  **{n: (V(lane_bound_term(n), (), INT32) if getattr(sp, n) is None else getattr(sp, n))
                     for n in LANE_BOUNDS},
                  "page_size": 1 if not sp.paged else V(page, (), INT32), "NUM_STEPS": sp.NUM_STEPS}
    constexprs.update(host.paths)
    if host.paths.get("TRANSLATE"):
        v2p = z3.Function("v2p", z3.IntSort(), z3.IntSort())
        register_function(functions, v2p, lambda app: {})
        tensors["v2p"] = TensorModel("v2p", z3.Int("v2p_len"), INT64, v2p)
    ex = Executor(path, KERNEL, constexprs=constexprs, scalars=scalars, tensors=tensors,
                  grid=[G0, num_seqs, K], oracle=make_oracle(hyps, functions, axioms))
    res = ex.run()
    functions.update(res.functions)
    res.block, res.extra_owner, res.batch = 1, False, num_seqs
    report = {"num_seqs": num_seqs, "topk": K, "num_steps": D, "page_size": page, "C": C, "width": width,
              "alloc_bs": alloc_bs, "indptr_stride": indptr_stride, "row_stride": r2t_width, "pool_rows": pool_rows,
              "grid0": G0, "pid0": res.pid[0], "pid1": res.pid[1], "pid2": res.pid[2]}
    if sp.NUM_STEPS:
        report["token_blocks"] = blocks
    report.update({n: lane_bound_term(n) for n in LANE_BOUNDS if getattr(sp, n) is None})
    run = Run(sp.name, sp.label, res, hyps, functions, tensors, {}, None, None, report,
              list(res.side_proofs) + axioms, axioms)
    run.spec, run.host, run.host_width_hyps = sp, host, sizing
    # tensor contents the launch model fixes rather than assumes (listed with the preconditions)
    run.contract = ("model: positions[z] = seq_len[z div K] (sglang passes the branch positions)",)
    run.lemmas += _lemmas(sp, res, pool_row)
    # a lemma proved from a left-out precondition (L-PREFIX-ROOM from draft room) would put
    # it back: such lemmas go with it
    run.lemmas = [lm for lm in run.lemmas if not (set(lm.hyps) & set(host.drop))]
    run.capacity = capacity(run)
    if run.capacity is not None:
        run.lemmas.insert(0, run.capacity)
    b = res.pid[1]
    # only the req_to_token reads need these (the paged read's div/mod slows every other query)
    run.read_lemmas = [symexec_lemmas.at(symexec_lemmas.kv_extension_read_in_row, seq_len(b), res.pid[2], LANES[0], K, D, page),
                       mul_mono(pool_row(b) + 1, pool_rows, r2t_width)]
    return run


def capacity(run):
    """KV capacity under this run's contract, proved once (draft room for every request and
    sglang's width give ``used_len(S, K, bs_d, D) <= width``), or None when the contract does
    not give it (draft room left out): every query then gets the linear fact instead of
    re-deriving it through the products."""
    lem = [proof_core.instantiate(spec_lemmas.prefix_room(num_seqs), num_seqs), mul_mono(num_seqs, alloc_bs, K * C),
           mul_mono(P(num_seqs) + num_seqs * D, num_seqs * C, K)]
    lem = [lm for lm in lem if not (set(lm.hyps) & set(run.host.drop))]
    try:
        return proof_core.check("KV-CAPACITY-UNDER-SGLANG-CONTRACT",
                        spec.draft_kv_capacity_ok(P(num_seqs), K, num_seqs, D, width), hyps=spec_hyps(run),
                        by=lem + run.axioms, rlimit=2_000_000)
    except (proof_core.Refuted, proof_core.Unknown):
        return None


def _lemmas(sp, res, pool_row) -> list:
    """Lemma instances at the program's own terms: the branch segment stays in its row
    (L-KV-SEGMENT-IN-ROW, with the capacity that draft room and sglang's width give),
    the extension reads stay in the request's req_to_token row, the positions prefix."""
    b, t = res.pid[1], res.pid[2]
    it = iters_of(sp, res.pid[0])
    s = seq_len(b)
    return [proof_core.instantiate(spec_lemmas.prefix_room(num_seqs), num_seqs), mul_mono(num_seqs, alloc_bs, K * C),
            proof_core.instantiate(spec_lemmas.prefix_bound(num_seqs), b), proof_core.instantiate(spec_lemmas.prefix_bound(num_seqs), b + 1),
            proof_core.instantiate(spec_lemmas.prefix_bound(num_seqs), num_seqs),
            mul_mono(P(num_seqs) + num_seqs * D, num_seqs * C, K),
            proof_core.instantiate(spec_lemmas.prefix_monotone(num_seqs), num_seqs, b + 1), mul_mono(P(b + 1), P(num_seqs), K),
            mul_mono(b + 1, num_seqs, it * K), mul_mono(it, D, num_seqs * K), mul_mono(it, D, width),
            mul_mono(t, K - 1, s + it),
            symexec_lemmas.at(symexec_lemmas.kv_segment_in_row, P(b), P(num_seqs), b, num_seqs, t, it, s, K, D, width),
            proof_core.instantiate(spec_lemmas.positions_within_request(), t, b), proof_core.instantiate(spec_lemmas.positions_prefix(), b),
            proof_core.instantiate(spec_lemmas.positions_prefix(), num_seqs), symexec_lemmas.at(symexec_lemmas.div_unique, b, t, K),
            symexec_lemmas.at(symexec_lemmas.indptr_entry_is_segment_start, Q(b * K + t), P(b), b, t, K, it, s),
            symexec_lemmas.at(symexec_lemmas.kv_segment_start_nonneg, P(b), b, t, K, it, s), symexec_lemmas.at(symexec_lemmas.div_unique, num_seqs, z3.IntVal(0), K)]


PROPERTIES = ("IN-BOUNDS", "NO-WRAP", "NO-TRUNCATION", "RACE-FREE", "FOOTPRINT")


# --- proving, refuting, replaying --------------------------------------------------------------------

# Preconditions sglang does not check, each refuted by a replay when left out.
UNCHECKED = {
    "draft_room": "seq_len[b] + num_steps <= max_context_len (spec.draft_room_ok): the scheduler keeps it, "
                  "no launch site asserts it",
    "row_offsets_int32_kv_indices_stride": "(num_steps - 1) * kv_indices_stride < 2^31 "
                                           "(spec.int32_row_offsets_ok): sglang asserts only the row width < 2^31, "
                                           "and the kernel computes kv_indices_stride * step in int32",
    "row_offsets_int32_kv_indptr_stride": "(num_steps - 1) * kv_indptr_stride < 2^31 (spec.int32_row_offsets_ok): "
                                          "kv_indptr_stride * step is an int32 product too (never checked; far "
                                          "from today's kv_indptr rows)",
}
REPLAY_LIMITS = {"num_seqs": (1, 3), "topk": (1, 3), "num_steps": (1, 4), "page_size": (1, 4), "C": (1, 24),
                 "width": (0, 400), "alloc_bs": (1, 4), "indptr_stride": (1, 20), "row_stride": (1, 200),
                 "pool_rows": (1, 6), "grid0": (1, 8), "token_blocks": (1, 2),
                 # symbolic lane bounds (their values are powers of two, a precondition)
                 "bs_upper": (1, 4), "iter_upper": (1, 4), "num_tokens_upper": (1, 16)}
# A wrapped row offset needs a row of 2^30 cells: the smallest such batch (3 steps, one request,
# one branch), its buffers allocated but never filled (only the cells the kernel writes are touched).
WRAP_LIMITS = {"num_seqs": (1, 1), "topk": (1, 1), "num_steps": (1, 3), "page_size": (1, 1), "C": (1, 2**31),
               "width": (0, 2**30 + 2**20), "alloc_bs": (1, 1), "indptr_stride": (1, 2**30 + 2**20),
               "row_stride": (1, 64), "pool_rows": (1, 2), "grid0": (1, 3), "token_blocks": (1, 1),
               "bs_upper": (1, 1), "iter_upper": (1, 4), "num_tokens_upper": (1, 1)}


IDENTITY_PATHS = {"window_size": 0, "sink_size": 0, "ENTRY_PAGE_SIZE": 1, "TRANSLATE": False}


def prove(sp: KvSpec, path: str, host: Host | None = None, progress=None) -> list:
    if host is not None and any(host.paths.get(k, d) != d for k, d in IDENTITY_PATHS.items()):
        raise ValueError(f"read-plan settings {host.paths}: the spec describes the identity plan only "
                         f"({IDENTITY_PATHS})")
    run = run_kernel(sp, path, host)
    return prove_run(run, obligations, PROPERTIES, progress)


def refute_without(sp: KvSpec, path: str, precondition: str = "", host: Host | None = None, props=None,
                   wrap_box: bool | None = None):
    """Leave one precondition out (none: ``""``): the property it protects must fail, and the
    counterexample, replayed on the kernel at ``path`` under the checked interpreter, must
    reproduce it: an out-of-bounds store without draft room; Triton's int32 overflow check
    (on in the checked interpreter) on the row offset without the int32 rows, with the
    smallest buffers that show it (3 rows of 2^30 cells, allocated, never filled).  ``props``
    (default: the property the precondition protects) and ``wrap_box`` (default: for a row
    offset precondition) choose what a planted edit of the kernel is refuted by."""
    host = host or Host()
    if precondition:
        host = dc_replace(host, drop=tuple(host.drop) + (precondition,))
    run = run_kernel(sp, path, host)
    props = props or {"": PROPERTIES, "draft_room": ("IN-BOUNDS",)}.get(precondition, ("NO-WRAP",))
    wrap_box = precondition.startswith("row_offsets") if wrap_box is None else wrap_box
    limits = WRAP_LIMITS if wrap_box else REPLAY_LIMITS
    return refute(run, obligations, props, lambda conc: replay(sp, conc, path), limits,
                  batch_cap=limits["num_seqs"][1], expect=("oob", "assert", "wrap", "race", "output"))


def replay(sp: KvSpec, conc: dict, path: str):
    """The counterexample as a batch, launched on sglang's kernel (source at ``path``) by
    :func:`specbound.engines.sglang.launch.draft_kv` as the launch sites launch it."""

    ns_, k, d = conc["num_seqs"], conc["topk"], conc["num_steps"]
    page = conc["page_size"] if sp.paged else 1
    contents = conc["_contents"]
    seq = [max(0, contents["seq_len"](i)) for i in range(ns_)]
    row_stride, pool = max(conc["row_stride"], 1), max(conc["pool_rows"], 1)
    rows = [min(max(contents["pool_row"](i), 0), pool - 1) for i in range(ns_)]
    width, stride = conc["width"], conc["indptr_stride"]
    grid = (conc["grid0"], ns_, k)
    inputs = {"num_seqs": ns_, "topk": k, "num_steps": d, "page_size": page, "seq_lens": seq,
              "req_pool_indices": rows, "row_stride": row_stride, "kv_indices": [d, width],
              "kv_indptr": [d, stride], "grid": list(grid), "spec": sp.label}
    return sglang.draft_kv(load_kernel(path, KERNEL), seq_lens=seq, req_pool_indices=rows,
                           row_stride=row_stride, pool_rows=pool, topk=k, num_steps=d, page_size=page,
                           width=width, indptr_stride=stride, grid=grid, seq_lens_dtype=sp.seq_lens_dtype,
                           lane_bounds=tuple(conc[n] if getattr(sp, n) is None else getattr(sp, n) for n in LANE_BOUNDS),
                           num_steps_constexpr=sp.NUM_STEPS, inputs=inputs)
