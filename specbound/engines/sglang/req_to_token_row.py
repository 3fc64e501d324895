"""Consumer rows ``consumer.req_to_token_row[<pool>@<site>]``: the ``req_to_token`` row sglang
allocates, against the draft slots the draft decode reads from it.

The draft decode's kv build (``generate_draft_decode_kv_indices``) reads request ``b``'s row up
to :func:`specbound.spec.kv_req_to_token_span` (``seq_len + K * num_steps`` with contiguous
branches, page aligned otherwise); the kernel proofs take that as a hypothesis
(``req_to_token_row_covers_reads``).  Those slots are the ones sglang's decode reservation wrote
into the same row just before (``assign_draft_cache_locs`` in spec v1, the reservation of
``eagle_prepare_for_decode`` / ``assign_req_to_token_pool`` in spec v2, which reserves twice the
draft footprint), so a row narrower than the span is both a read past the row and a write past it.
The spec's row (:func:`specbound.spec.req_to_token_draft_row_width`, theorem ``KV-R2T-ROW-COVERS``)
covers every request with draft room.

* A *pool site* is a call under ``srt/`` with keywords ``size=`` and ``max_context_len=``, whose
  width mentions ``context_len`` (the pool builders: ``ReqToTokenPool``, its decode, hybrid and
  unified variants; the classes' own ``super().__init__(max_context_len=...)`` pass the width on).
  sglang's MLX runner is a stub without speculative decoding (``hardware_backend/mlx/``): not a row.
* The width is traced (:class:`RowTracer`): ``<x>.model_config.context_len`` is ``C``,
  ``max_speculative_num_draft_tokens()`` is ``n``, ``speculative_num_steps`` / ``_eagle_topk`` /
  ``_num_draft_tokens`` are ``D`` / ``K`` / ``n`` on any object, ``get_alloc_page_size()`` is the
  page size (decode-context parallelism off), and the algorithm is EAGLE with draft KV (its
  ``is_uno()`` false, ``has_draft_kv()`` true): the draft decode runs only there; the model's
  configuration is opaque beyond its context length (``if`` tests on it stay unknown).  A caller under
  ``test/`` is not a path.
* Judged through the core at page size 1 (sglang's default; the contiguous draft slots), per
  traced path (one row per site, over the first ``MAX_SELVES`` classes running it): every request
  ``0 <= seq_len``, ``seq_len + D <= C`` (the kernel's draft room), under sglang's own
  configuration rule (``K = 1 => n = D + 1``, ``speculative_hook``): ``matched``; ``overread`` when
  a request reads (and its reservation wrote) past the row, with the smallest counterexample and
  what sglang's own EAGLE parameters for Llama do, replayed on sglang's
  ``generate_draft_decode_kv_indices`` under the checked interpreter with the request in the
  pool's last row (past the row is past the tensor there).  A path whose width is not traced
  leaves the row ``unknown`` unless another path is already refuted.  Page size > 1 is not
  judged here (the spec's width covers it, KV-R2T-ROW-COVERS; sglang widens that row and asserts
  it since PR #26972).
"""

from __future__ import annotations

import ast
import time

import z3

from specbound import spec
from specbound.proofs import core
from specbound.proofs.model import C, D, K, labelled, n, page

from specbound.audit import judge
from specbound.audit.extract import SourceIndex
from specbound.audit.program import Program
from specbound.audit.report import ERROR, MATCHED, NOT_PRESENT, OVERREAD, UNKNOWN, AuditReport, Row
from specbound.audit.trace import Tracer
from specbound.audit.trace_values import EnumMember, Num, Opaque, Path, Truth, source_text
from . import bindings, buffer_replay, kv_kernel
from .launch import KV_ALIASES, KV_FILES, KV_KERNEL
from .site_trace import functions_mentioning, resolve, selves

KIND = "req_to_token_row"
CHECK = ("the req_to_token slots the draft decode reads, and its reservation wrote, for a request with draft "
         "room (spec.kv_req_to_token_span) fit the row sglang allocates")
SEQ = z3.Int("seq_len[b]")
REPORTED = (("seq_len[b]", SEQ), ("topk", K), ("num_steps", D), ("num_draft_tokens", n), ("page_size", page),
            ("max_context_len", C))
# Where sglang builds its pools: model_runner.py (0.5.1-0.5.13), model_runner_kv_cache_mixin.py (0.5.14-0.5.16),
# mem_cache/kv_cache_configurator.py and unified_memory_pool.py (0.5.17 on), hardware backends' runners.
POOL_FOLDERS = ("/srt/model_executor/", "/srt/mem_cache/", "/srt/hardware_backend/")
NOT_SPECULATIVE = ("/hardware_backend/mlx/",)   # MLX's model runner is a stub: no speculative decoding
MAX_SELVES = 4
# The model's configuration: of it the width reads the context length alone; the runner's
# `if` tests on its other fields (mamba, hybrid, ...) are left unknown instead of being traced
# through the model loader (which spent the tracer's budget on 0.5.4.post2-0.5.6.post2).
MODEL_OBJECTS = ("model_config", "hf_config")
TEST_FOLDER = "test/"
# The algorithm whose draft decode reads the row: EAGLE (and its family), which keeps draft KV.
EAGLE = {"is_uno": False, "has_draft_kv": True, "is_eagle": True, "is_eagle3": False, "is_none": False,
         "is_ngram": False, "is_dflash": False, "is_standalone": False}
QUANTITY = {"speculative_num_steps": D, "speculative_eagle_topk": K, "speculative_num_draft_tokens": n,
            "max_speculative_num_draft_tokens": n}
# speculative_hook._auto_choose_speculative_params for LlamaForCausalLM (and Grok): (steps, topk, tokens)
SGLANG_DEFAULT = {"num_steps": (D, 5), "topk": (K, 4), "num_draft_tokens": (n, 8)}
OVERREAD_WORDS = ("the draft decode reads past the request's req_to_token row: its kv indices take the next "
                  "row's slots, so the draft attends over another request's KV; the reservation that wrote those "
                  "slots wrote past the row the same way, over the next request's first token slots (silent "
                  "corruption of another request's KV mapping; past the pool's last row, an illegal address)")


class RowTracer(Tracer):
    """The pool width's names, read as the spec's quantities (the module docstring lists them)."""

    def _resolve(self, e, frame, path, receiver):
        if isinstance(e, ast.Attribute):
            if e.attr == "context_len" and source_text(e.value).endswith("model_config"):
                return [(Num(C), path)]
            if e.attr in QUANTITY:
                return [(Num(QUANTITY[e.attr]), path)]
            if e.attr == "speculative_algorithm":
                return [(EnumMember("SpeculativeAlgorithm", "EAGLE"), path)]
            if e.attr in MODEL_OBJECTS:   # its context length is read above; its other fields, never
                return [(Opaque(f"<{e.attr}>"), path)]
        if isinstance(e, ast.Call) and not e.args and not e.keywords:
            f = e.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in QUANTITY:
                return [(Num(QUANTITY[name]), path)]
            if name == "get_alloc_page_size":
                return [(Num(page), path)]
            if isinstance(f, ast.Attribute) and name in EAGLE:
                return [(Truth(EAGLE[name]), path)]
        return super()._resolve(e, frame, path, receiver)


def check_req_to_token_rows(program: Program, report: AuditReport, index: SourceIndex | None = None,
                            replay: bool = True) -> None:
    """``replay`` (with ``index``): run sglang's draft kv kernel at each finding's counterexample
    (once per distinct case: the pools of one release share their width)."""
    sites = list(pool_sites(program))
    if not sites:
        if not program.functions_named(KV_KERNEL):   # nothing reads a draft slot from the row
            report.add(Row(f"consumer.{KIND}[pool]", "sglang's req_to_token pool", CHECK, "-", NOT_PRESENT,
                           f"no `{KV_KERNEL}` and no req_to_token pool builder in this sglang"))
            return
        report.add(Row(f"consumer.{KIND}[pool]", f"sglang's req_to_token pool ({', '.join(POOL_FOLDERS)})", CHECK,
                       "ast", UNKNOWN, "no call building a req_to_token pool with size= and max_context_len= was "
                       f"found, though `{KV_KERNEL}` reads draft slots from it: the row is not judged"))
        return
    replays: dict = {}
    for fn, call, width_expr in sites:
        where = f"{fn.rel}:{call.lineno}"
        row_id = f"consumer.{KIND}[{pool_name(fn, call)}@{where}]"
        t0 = time.perf_counter()
        try:
            row = _row(program, fn, call, width_expr, row_id, where,
                       (index, replays) if replay and index is not None else None)
        except Exception as e:  # noqa: BLE001 - the audit's own failure is an error row
            row = Row(row_id, f"{fn.qual} ({where})", CHECK, "z3", ERROR, f"the check failed: {type(e).__name__}: {e}")
        row.seconds = time.perf_counter() - t0
        report.add(row)


def pool_sites(program: Program):
    """(function, call, width expression) of every ``req_to_token`` pool built with a width."""
    fns = [fn for folder in POOL_FOLDERS for fn in functions_mentioning(program, "max_context_len", folder=folder)]
    for fn in fns:
        if any(part in "/" + fn.rel for part in NOT_SPECULATIVE):
            continue
        for node in program.walk(fn.node):
            if not isinstance(node, ast.Call):
                continue
            kw = {k.arg: k.value for k in node.keywords}
            width = kw.get("max_context_len")
            if "size" in kw and width is not None and not isinstance(width, ast.Name) \
                    and "context_len" in source_text(width):
                yield fn, node, width


def pool_name(fn, call) -> str:
    """The pool class a builder constructs: the callee, or for a local holding the class
    (``req_to_token_pool_cls = ReqToTokenPool``, 0.5.21 on) the first class assigned to it, so a
    row keeps its name across releases."""
    callee = source_text(call.func)
    if isinstance(call.func, ast.Name):
        for node in ast.walk(fn.node):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and any(
                    isinstance(t, ast.Name) and t.id == callee for t in node.targets):
                return node.value.id
    return callee


def _from_tests(p: Path) -> bool:
    return any(str(step).startswith(TEST_FOLDER) or f" {TEST_FOLDER}" in str(step) for step in p.trail)


def _widths(program, fn, width_expr, where) -> list:
    """(width value, path) of every traced path, over the classes that run ``fn`` (the first
    MAX_SELVES: a model-runner mixin is run by every runner class, which build the pool alike)."""
    out = []
    for self_val in list(selves(program, fn))[:MAX_SELVES]:
        tracer = RowTracer(program, bindings.BINDINGS, bindings.DRAFT_DECODE)
        out += [(v, p) for v, p in resolve(tracer, width_expr, tracer.top_frame(fn, self_val), Path(trail=(where,)))
                if not _from_tests(p)]
    return out


def _row(program, fn, call, width_expr, row_id, where, replay) -> Row:
    subject = (f"{fn.qual} ({where}) -> {source_text(call.func)}(max_context_len={source_text(width_expr)}) -> "
               "draft decode kv build (reads seq_len + K*num_steps slots) / decode reservation (writes them)")
    verdicts, untraced, seen = [], [], set()
    widths = _widths(program, fn, width_expr, where)
    if not widths:
        untraced.append(f"`{source_text(width_expr)}` was not traced to a number: no value was found for it")
    for wv, wp in widths:
        if not isinstance(wv, Num):
            if core.satisfy(f"{row_id}/untraced_feasible", row_contract(0, list(wp.conds))) is not None:
                untraced.append(f"`{source_text(width_expr)}` was not traced to a number on a path: "
                                f"{getattr(wv, 'reason', wv)}")
            continue
        key = (str(wv.term), tuple(str(c) for c in wp.conds))
        if key in seen:
            continue
        seen.add(key)
        j = judge_row(wv.term, list(wp.conds), row_id)
        if j.verdict != judge.INFEASIBLE:
            verdicts.append((j, wv.term))
    allocation = f"{where} {source_text(call)[:160]}"
    order = [OVERREAD, judge.ERROR, judge.MATCHED]
    verdicts.sort(key=lambda v: order.index(v[0].verdict) if v[0].verdict in order else 1)
    if untraced and not (verdicts and verdicts[0][0].verdict == OVERREAD):
        return Row(row_id, subject, CHECK, "ast", UNKNOWN, untraced[0], allocation=allocation)
    if not verdicts:
        return Row(row_id, subject, CHECK, "ast", UNKNOWN, "no traced path to the width is consistent with the "
                   "preconditions", allocation=allocation)
    j, width = verdicts[0]
    status = {OVERREAD: OVERREAD, judge.MATCHED: MATCHED}.get(j.verdict, ERROR)
    detail = j.detail + f" [row width = {z3.simplify(width)}; {len(verdicts)} traced path(s)"
    detail += f"; {len(untraced)} path(s) not traced]" if untraced else "]"
    row = Row(row_id, subject, CHECK, "z3", status, detail, j.counterexample, size=j.size, required=j.required,
              allocation=allocation)
    if status == OVERREAD and j.counterexample and replay is not None:
        replay_row(*replay, row, width)
    return row


def row_contract(width, conds) -> dict:
    """The judgement's hypotheses: the draft kernel's contract for one request, sglang's
    configuration rule, the traced path's conditions."""
    hyps = {**labelled(spec.kv_shape_ok(K, D, page)), **labelled(spec.context_ok(C)),
            **labelled(spec.seq_len_ok(SEQ, C, name="seq_len[b]")),
            **labelled(spec.draft_room_ok(SEQ, D, C, name="seq_len[b]")),
            "tree_size_positive": n >= 1, "page_size_one": page == 1,
            # speculative_hook: num_draft_tokens is forced to num_steps + 1 when topk == 1
            "chain_tree_size": z3.Implies(K == 1, n == D + 1)}
    for i, c in enumerate(conds):
        hyps[f"path_{i}"] = c
    return hyps


def judge_row(width, conds, name: str) -> judge.Judgement:
    span = spec.kv_req_to_token_span(SEQ, K, D, page)
    goal = span <= width
    required = f"{z3.simplify(z3.substitute(span, (page, z3.IntVal(1))))} slots"
    size = str(z3.simplify(width)) if z3.is_expr(width) else str(width)
    hyps = row_contract(width, conds)
    try:
        done = judge.settled(name, goal, hyps, required, size, "proved for every request with draft room, under")
        if done is not None:
            return done
        names = tuple(k for k, _ in REPORTED)
        cex = judge.counterexample(hyps, [], goal, names, reported=REPORTED)
        return judge.Judgement(OVERREAD, required, size, counterexample=cex,
                               detail=f"refuted for a request with draft room (seq_len + num_steps <= C): "
                                      f"{OVERREAD_WORDS}; e.g. {cex}{_at_sglang_default(width, hyps, goal, name)}")
    except core.Unknown as e:
        return judge.Judgement(judge.ERROR, required, size, detail=f"the solver gave no verdict: {e}")


def _at_sglang_default(width, hyps, goal, name: str) -> str:
    """What the width does at sglang's own EAGLE parameters for Llama (SGLANG_DEFAULT), page size 1:
    from which seq_len on a request reads past the row, when that is a fixed distance from ``C``."""
    fixed = {"sglang_default": z3.And(*(v == x for v, x in SGLANG_DEFAULT.values()))}
    if core.satisfy(f"{name}/at_default", {**hyps, **fixed, "refuted": z3.Not(goal)}) is None:
        return ""
    at = [(v, z3.IntVal(x)) for v, x in SGLANG_DEFAULT.values()] + [(page, z3.IntVal(1))]
    first = z3.simplify(z3.substitute(C - (width - K * D + 1), *at))   # seq_len > width - K*D reads past
    text = ", ".join(f"{k} {x}" for k, (_, x) in SGLANG_DEFAULT.items())
    where = f"every request with seq_len >= C - {first.as_long()}" if z3.is_int_value(first) \
        else "a request near the context"
    return (f"; at sglang's own choice for Llama (_auto_choose_speculative_params: {text}; page size 1), "
            f"{where} and draft room reads past its row")


def replay_row(index: SourceIndex, done: dict, row: Row, width) -> None:
    """sglang's draft kv kernel at the counterexample, the request in the last row of a pool as wide
    as sglang's: the checked interpreter's out-of-bounds load is the evidence (``done``: the
    replays already run, by case)."""
    cex = row.counterexample
    w = judge.evaluate(width, cex, REPORTED)
    case = {"topk": cex["topk"], "num_steps": cex["num_steps"], "page_size": cex["page_size"],
            "seq_lens": [cex["seq_len[b]"]], "max_context_len": cex["max_context_len"], "slot_seed": 0,
            "row_width": w}
    key = tuple(sorted((k, str(v)) for k, v in case.items()))
    if key not in done:
        found, kernel, why = buffer_replay.load(index, KV_KERNEL, KV_FILES, KV_ALIASES, kv_kernel.KV_FED)
        done[key] = (found, None if kernel is None else kv_kernel.run_kv_in_row(kernel, found, case, w), why)
    found, finding, why = done[key]
    if why:
        row.detail += f"; no replay: {why}"
        return
    row.replay = {"kernel": f"sglang's {KV_KERNEL} ({found.where})", "inputs": case,
                  "verdict": "oob" if finding is not None else "none",
                  "message": finding.message if finding is not None else "no out-of-bounds access"}
    if finding is None:
        row.status = ERROR   # the model says the kernel reads past the row, the kernel does not
        row.detail += "; the replay on sglang's kernel stayed in bounds: the audit's model of the read is off"
    else:
        row.evidence = finding.message
