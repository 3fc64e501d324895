"""Consumer rows ``consumer.req_to_token_row[<pool>@<site>]`` (page size 1) and
``consumer.req_to_token_row_paged[...]`` (page size > 1): the ``req_to_token`` row sglang
allocates, against the draft slots the draft decode reads from it.

The draft decode's kv build (``generate_draft_decode_kv_indices``) reads request ``b``'s row up
to :func:`specbound.spec.kv_req_to_token_read_end` (``seq_len + K * num_steps`` with contiguous
branches; with page aligned branches the last branch's page start plus its ``num_steps`` slots,
theorem KV-R2T-READ-END); the kernel proofs take a row as wide as the span as a hypothesis
(``req_to_token_row_covers_reads``).  Those slots are the ones sglang's decode reservation wrote
into the same row just before (``assign_draft_cache_locs`` in spec v1, the reservation of
``eagle_prepare_for_decode`` / ``assign_req_to_token_pool`` in spec v2, which reserves twice the
draft footprint), so a row narrower than the read is both a read past the row and a write past it.
The spec's row (:func:`specbound.spec.req_to_token_draft_row_width`, theorem ``KV-R2T-ROW-COVERS``)
covers every request with draft room.

* A *pool site* is a call under ``srt/`` with keywords ``size=`` and ``max_context_len=``, whose
  width mentions ``context_len`` (the pool builders: ``ReqToTokenPool``, its decode, hybrid and
  unified variants; the classes' own ``super().__init__(max_context_len=...)`` pass the width on).
  sglang's MLX runner is a stub without speculative decoding (``hardware_backend/mlx/``): not a row.
* The width is traced (:class:`RowTracer`): ``<x>.model_config.context_len`` is ``C``,
  ``max_speculative_num_draft_tokens()`` is ``n``, ``speculative_num_steps`` / ``_eagle_topk`` /
  ``_num_draft_tokens`` are ``D`` / ``K`` / ``n`` on any object, ``get_alloc_page_size()`` and
  ``<x>.page_size`` are the page size (decode-context parallelism off), and the algorithm is
  EAGLE with draft KV (its ``is_uno()`` false, ``has_draft_kv()`` true): the draft decode runs
  only there; the model's configuration is opaque beyond its context length (``if`` tests on it
  stay unknown).  A caller under ``test/`` is not a path.
* The unified memory pools (``unified_memory_pool.py``) are built only with
  ``--enable-unified-memory``; where the release's handler of that switch refuses a draft tree
  (:func:`unified_memory_rule`: ``assert ... speculative_eagle_topk in (None, 1)``, or no
  speculative decoding at all), their rows are judged under ``topk = 1``, citing the assert.
* Judged through the core per layout (page size 1, sglang's default: contiguous draft slots;
  page size > 1: page aligned branches when topk > 1), per traced path (one row per site and
  layout, over the first ``MAX_SELVES`` classes running it): every request ``0 <= seq_len``,
  ``seq_len + D <= C`` (the kernel's draft room), under sglang's own configuration rule (``K = 1
  => n = D + 1``, ``speculative_hook``): ``matched``; ``overread`` when a request reads (and its
  reservation wrote) past the row, with the smallest counterexample and what sglang's own EAGLE
  parameters for Llama do (at page size 64 for the paged row), replayed on sglang's
  ``generate_draft_decode_kv_indices`` under the checked interpreter with the request in the
  pool's last row (past the row is past the tensor there).  A path whose width is not traced
  leaves the row ``unknown`` unless another path is already refuted.
* The same row against spec v2's decode reservation (``2 * alloc_len_per_decode`` past the
  committed length, more than the draft reads): :mod:`.req_to_token_reservation`, judged here per
  site on the widths traced once.
"""

from __future__ import annotations

import ast
import time
from dataclasses import dataclass

import z3

from specbound import spec
from specbound.proofs import core
from specbound.proofs.model import C, D, K, labelled, n, page

from specbound.audit import judge
from specbound.audit.extract import SourceIndex
from specbound.audit.program import Program
from specbound.audit.report import ERROR, MATCHED, NOT_PRESENT, OVERREAD, UNKNOWN, AuditReport, Row
from specbound.audit.trace import Tracer
from specbound.audit.trace_values import EnumMember, Num, Opaque, Path, Truth, source_text, term_ids
from . import bindings, buffer_replay, kv_kernel
from .req_to_token_reservation import CHECK as RESERVATION_CHECK, KIND as RESERVATION_KIND, SGLANG_DEFAULT, \
    Reservation
from .launch import KV_ALIASES, KV_FILES, KV_KERNEL
from .site_trace import functions_mentioning, resolve, selves

KIND = "req_to_token_row"
CHECK = ("the req_to_token slots the draft decode reads, and its reservation wrote, for a request with draft "
         "room (spec.kv_req_to_token_read_end) fit the row sglang allocates")
SEQ = z3.Int("seq_len[b]")
REPORTED = (("seq_len[b]", SEQ), ("topk", K), ("num_steps", D), ("num_draft_tokens", n), ("page_size", page),
            ("max_context_len", C))
# Where sglang builds its pools: model_runner.py (0.5.1-0.5.13), model_runner_kv_cache_mixin.py (0.5.14-0.5.16),
# mem_cache/kv_cache_configurator.py and unified_memory_pool.py (0.5.17 on), hardware backends' runners.
POOL_FOLDERS = ("/srt/model_executor/", "/srt/mem_cache/", "/srt/hardware_backend/")
NOT_SPECULATIVE = ("/hardware_backend/mlx/",)   # MLX's model runner is a stub: no speculative decoding
MAX_SELVES = 4
# The unified memory pools are built only with --enable-unified-memory (KVCacheConfigurator), whose
# handler bounds the draft configuration (unified_memory_rule).
UNIFIED_POOL_FILE = "/unified_memory_pool.py"
UNIFIED_BUILDER = "_unified_"
NO_SPECULATION = "speculative decoding"   # what the handler refuses when it refuses all of it
UNIFIED_SWITCH = "enable_unified_memory"


@dataclass(frozen=True)
class Layout:
    """A page-size regime judged as its own row: contiguous draft slots at page size 1, page
    aligned branches above it (topk > 1); ``page_size`` is where the sglang-default line is shown."""
    suffix: str
    words: str
    label: str
    condition: object
    page_size: int


LAYOUTS = (Layout("", "page size 1", "page_size_one", page == 1, 1),
           # 64: the page size sglang forces for FlashMLA and picks for TRT-LLM MLA/MHA (arg_groups/overrides.py)
           Layout("_paged", "page size > 1", "page_size_above_one", page >= 2, 64))
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
            if e.attr == "page_size":   # server_args.page_size, the runner's copy (no decode-context parallelism)
                return [(Num(page), path)]
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
    judged: dict = {}   # pool builders of one release share their width: one judgement per path
    unified = unified_memory_rule(program)
    reservation = Reservation(program, RowTracer, index, replay)
    for fn, call, width_expr in sites:
        where = f"{fn.rel}:{call.lineno}"
        t0, widths, failed = time.perf_counter(), [], None
        try:
            widths = _widths(program, fn, width_expr, where)
        except Exception as e:  # noqa: BLE001 - the audit's own failure is an error row
            failed = f"the check failed: {type(e).__name__}: {e}"
        rule = {}
        if unified is not None and is_unified(fn, call):
            rule = {"unified_memory_chain_only": unified[0]}   # sglang's assert, at unified[1]
        said = (f" [a unified memory pool: sglang refuses {unified[2]} with --enable-unified-memory ({unified[1]}), "
                f"so {'no draft runs' if unified[2] == NO_SPECULATION else 'topk = 1'} here]") if rule else ""
        pool = pool_label(fn, call)
        judges = [(f"consumer.{KIND}{layout.suffix}[{pool}@{where}]",
                   lambda rid, layout=layout: _row(fn, call, width_expr, widths, layout, rule, rid, where,
                                                   (index, replays) if replay and index is not None else None,
                                                   judged))
                  for layout in LAYOUTS]
        if reservation.helper is not None:
            judges += [(f"consumer.{RESERVATION_KIND}{layout.suffix}[{pool}@{where}]",
                        lambda rid, layout=layout: reservation.row(fn, call, widths, rule, rid, where, layout)
                        if not (rule and unified[2] == NO_SPECULATION) else
                        Row(rid, f"{fn.qual} ({where}) -> decode reservation at {layout.words}", RESERVATION_CHECK,
                            "ast", MATCHED, "no draft reserves into this pool"))
                       for layout in LAYOUTS]
        for row_id, judge_one in judges:
            try:
                if failed:
                    raise RuntimeError(failed)
                row = judge_one(row_id)
            except Exception as e:  # noqa: BLE001 - the audit's own failure is an error row
                row = Row(row_id, f"{fn.qual} ({where})", CHECK, "z3", ERROR,
                          failed or f"the check failed: {type(e).__name__}: {e}")
            row.detail += said
            row.seconds, t0 = time.perf_counter() - t0, time.perf_counter()
            report.add(row)
    if reservation.helper is None:   # one row for the release: no pool's reservation is judged
        report.add(Row(f"consumer.{RESERVATION_KIND}[pool]", "sglang's decode reservation", RESERVATION_CHECK, "-",
                       NOT_PRESENT, reservation.why))


def unified_memory_rule(program: Program) -> tuple | None:
    """(condition, where, what is refused) when sglang refuses a draft tree with
    ``--enable-unified-memory``, the only switch that builds the unified pools (the configurator's
    ``if ...enable_unified_memory``):
    its handler (a function that returns at once ``if not <cfg>.enable_unified_memory``) asserts
    ``<cfg>.speculative_eagle_topk in (None, 1)`` at its top level (0.5.19 on), or under ``if
    <cfg>.speculative_algorithm == A`` where a top-level assert admits only ``None`` and ``A``
    (0.5.18: DSPARK), or asserts ``<cfg>.speculative_algorithm is None`` (0.5.17: no speculative
    decoding at all).  None when no such handler or assert is found: no rule is assumed."""
    for fn in functions_mentioning(program, UNIFIED_SWITCH):
        body = fn.node.body
        if not any(isinstance(st, ast.If) and _is_switch_off(st) for st in body[:4]):
            continue
        admitted = None
        for st in body:
            if isinstance(st, ast.Assert) and _attr_test(st.test, "speculative_algorithm", ast.In):
                admitted = _constants(st.test.comparators[0])
        for st, under in _asserts(body):
            where = f"{fn.rel}:{st.lineno}"
            if _attr_test(st.test, "speculative_algorithm", ast.Is) and _constants(st.test.comparators[0]) == {None}:
                if not under:
                    return K == 1, where, NO_SPECULATION
            if _attr_test(st.test, "speculative_eagle_topk", ast.In) and \
                    _constants(st.test.comparators[0]) == {None, 1}:
                if not under or admitted is not None and admitted <= {None, under}:
                    return K == 1, where, "a draft tree (topk > 1)"
    return None


def _is_switch_off(st: ast.If) -> bool:
    t = st.test
    return isinstance(t, ast.UnaryOp) and isinstance(t.op, ast.Not) and isinstance(t.operand, ast.Attribute) \
        and t.operand.attr == UNIFIED_SWITCH and len(st.body) == 1 and isinstance(st.body[0], ast.Return)


def _attr_test(t, attr: str, op) -> bool:
    return isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], op) \
        and isinstance(t.left, ast.Attribute) and t.left.attr == attr


def _constants(e) -> set | None:
    if isinstance(e, ast.Constant):
        return {e.value}
    if isinstance(e, (ast.Tuple, ast.List, ast.Set)) and all(isinstance(x, ast.Constant) for x in e.elts):
        return {x.value for x in e.elts}
    return None


def _asserts(body):
    """(assert, algorithm it is under or None): the top-level asserts, and those directly under
    ``if <cfg>.speculative_algorithm == "A"``."""
    for st in body:
        if isinstance(st, ast.Assert):
            yield st, None
        elif isinstance(st, ast.If) and _attr_test(st.test, "speculative_algorithm", ast.Eq):
            algo = _constants(st.test.comparators[0])
            if algo is not None and len(algo) == 1:
                yield from ((a, next(iter(algo))) for a in st.body if isinstance(a, ast.Assert))


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


def is_unified(fn, call) -> bool:
    """A pool of the unified memory stack: built in ``unified_memory_pool.py``, by a builder named
    for it (``_init_unified_swa_pools`` builds a plain ``ReqToTokenPool``), or of a ``Unified`` class."""
    return UNIFIED_POOL_FILE in "/" + fn.rel or UNIFIED_BUILDER in fn.node.name \
        or pool_name(fn, call).startswith("Unified")


def pool_label(fn, call) -> str:
    """The pool as a row names it: its class, marked ``/unified`` where a plain class is built for
    the unified memory stack (``_init_unified_swa_pools``), whose row differs from the same
    class's everywhere else (a release matrix keys its tables by this name)."""
    name = pool_name(fn, call)
    return f"{name}/unified" if is_unified(fn, call) and not name.startswith("Unified") else name


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


def _row(fn, call, width_expr, widths, layout, rule, row_id, where, replay, judged: dict) -> Row:
    subject = (f"{fn.qual} ({where}) -> {source_text(call.func)}(max_context_len={source_text(width_expr)}) -> "
               f"draft decode kv build at {layout.words} (reads up to spec.kv_req_to_token_read_end) / decode "
               "reservation (writes those slots)")
    verdicts, untraced, seen = [], [], set()
    if not widths:
        untraced.append(f"`{source_text(width_expr)}` was not traced to a number: no value was found for it")
    for wv, wp in widths:
        if not isinstance(wv, Num):
            if core.satisfy(f"{row_id}/untraced_feasible", row_contract(list(wp.conds), layout, rule)) is not None:
                untraced.append(f"`{source_text(width_expr)}` was not traced to a number on a path: "
                                f"{getattr(wv, 'reason', wv)}")
            continue
        key = (term_ids([wv.term]), term_ids(wp.conds))   # keys hold their terms: printing them costs seconds
        if key in seen:
            continue
        seen.add(key)
        memo = (key, layout.suffix, term_ids(rule.values()))
        if memo not in judged:
            judged[memo] = judge_row(wv.term, list(wp.conds), layout, row_id, rule)
        j = judged[memo]
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


def row_contract(conds, layout, rule: dict) -> dict:
    """The judgement's hypotheses: the draft kernel's contract for one request, sglang's
    configuration rules (``rule``: the pool's own, unified_memory_rule), the layout's page size,
    the traced path's conditions."""
    hyps = {**labelled(spec.kv_shape_ok(K, D, page)), **labelled(spec.context_ok(C)),
            **labelled(spec.seq_len_ok(SEQ, C, name="seq_len[b]")),
            **labelled(spec.draft_room_ok(SEQ, D, C, name="seq_len[b]")),
            "tree_size_positive": n >= 1, layout.label: layout.condition,
            # speculative_hook: num_draft_tokens is forced to num_steps + 1 when topk == 1
            "chain_tree_size": z3.Implies(K == 1, n == D + 1), **rule}
    for i, c in enumerate(conds):
        hyps[f"path_{i}"] = c
    return hyps


def judge_row(width, conds, layout, name: str, rule: dict) -> judge.Judgement:
    end = spec.kv_req_to_token_read_end(SEQ, K, D, page)
    goal = end <= width
    shown = z3.substitute(end, (page, z3.IntVal(1))) if layout.page_size == 1 else end
    required = f"{z3.simplify(shown)} slots"
    size = str(z3.simplify(width)) if z3.is_expr(width) else str(width)
    hyps = row_contract(conds, layout, rule)
    try:
        done = judge.settled(name, goal, hyps, required, size, "proved for every request with draft room, under")
        if done is not None:
            return done
        names = tuple(k for k, _ in REPORTED)
        cex = judge.counterexample(hyps, [], goal, names, reported=REPORTED)
        return judge.Judgement(OVERREAD, required, size, counterexample=cex,
                               detail=f"refuted for a request with draft room (seq_len + num_steps <= C): "
                                      f"{OVERREAD_WORDS}; e.g. {cex}"
                                      f"{_at_sglang_default(width, hyps, goal, layout, name)}")
    except core.Unknown as e:
        return judge.Judgement(judge.ERROR, required, size, detail=f"the solver gave no verdict: {e}")


def _at_sglang_default(width, hyps, goal, layout, name: str) -> str:
    """What the width does at sglang's own EAGLE parameters for Llama (SGLANG_DEFAULT) and the
    layout's page size: from which seq_len on a request reads past the row (page size 1, where
    that is a fixed distance from ``C``), or the smallest such request (paged)."""
    fixed = {"sglang_default": z3.And(*(v == x for v, x in SGLANG_DEFAULT.values())),
             "page_size_shown": page == layout.page_size}
    if core.satisfy(f"{name}/at_default", {**hyps, **fixed, "refuted": z3.Not(goal)}) is None:
        return ""
    text = ", ".join(f"{k} {x}" for k, (_, x) in SGLANG_DEFAULT.items())
    said = (f"; at sglang's own choice for Llama (_auto_choose_speculative_params: {text}; "
            f"page size {layout.page_size}), ")
    if layout.page_size == 1:
        at = [(v, z3.IntVal(x)) for v, x in SGLANG_DEFAULT.values()] + [(page, z3.IntVal(1))]
        first = z3.simplify(z3.substitute(C - (width - K * D + 1), *at))   # seq_len > width - K*D reads past
        where = f"every request with seq_len >= C - {first.as_long()}" if z3.is_int_value(first) \
            else "a request near the context"
        return said + f"{where} and draft room reads past its row"
    cex = judge.counterexample({**hyps, **fixed}, [], goal, ("seq_len[b]", "max_context_len"), reported=REPORTED)
    return said + (f"a request with seq_len {cex['seq_len[b]']} of C = {cex['max_context_len']} reads past its row"
                   if cex else "a request near the context reads past its row")


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
    buffer_replay.attach(row, f"sglang's {KV_KERNEL} ({found.where})", case, finding, "the read")
