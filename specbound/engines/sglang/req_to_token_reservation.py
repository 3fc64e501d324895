"""Consumer rows ``consumer.req_to_token_reservation[<pool>@<site>]`` (page size 1) and
``consumer.req_to_token_reservation_paged[...]`` (page size > 1): the ``req_to_token`` row sglang
allocates, against what its decode reservation writes into it.

Each decode step reserves, per request, the slots up to ``kv_committed_len +
get_alloc_reserve_per_decode()`` (``eagle_prepare_for_decode``), rounded up to whole pages from 0.5.17
on (``page_aligned_decode_alloc_lens``: :func:`specbound.spec.decode_reservation_end`), and
``assign_req_to_token_pool`` stores them into the request's row, its stores bounded by the
reservation's end only.  The reserve is twice ``get_alloc_len_per_decode()`` (``max(topk * num_steps,
num_draft_tokens)`` at page size 1): more than the draft decode reads, so this row can fail where
``consumer.req_to_token_row`` holds (a chain draft).

* The reserve: the returns of sglang's ``get_alloc_reserve_per_decode`` (0.5.13 on), traced with the
  pool width's tracer (``RESERVE_HELPER``; the caller passes it).  A release without the helper
  reserves otherwise (``ALLOC_LEN_PER_DECODE`` of spec v2's first form): the caller adds one ``not
  present`` row for the release (``why``); the draft slots it reserves are judged by the
  ``consumer.req_to_token_row`` rows.
* Whether the reservation is page aligned is read from the release (``PAGE_ALIGNED``: ``(committed +
  reserve + page_size - 1) // page_size`` under ``srt/speculative/`` or in ``allocation_sizing.py``);
  where it is not, the end is ``committed + reserve``.
* The committed length of a request the scheduler keeps decoding: ``kv_committed_len <= C - 3``
  (``SCHEDULER_BOUND``: ``max_req_len = min(context_len - 1, ...)`` in ``managers/tp_worker.py``, each
  request's ``max_new_tokens <= max_req_len - input_len - 1`` in ``managers/scheduler.py``, a request
  with output still to produce has ``input + output <= C - 3``, and every accepted token is committed,
  drafts and bonus: ``batch_result_processor``).  Where either source text is missing from the
  release, the bound is not assumed and the row is ``unknown``.
* Judged through the core per page-size regime (the caller's layouts), per traced width and reserve
  path, under sglang's configuration rule ``K = 1 => n = D + 1`` and the pool's own rule
  (``unified_memory_rule``): ``matched``; ``overrun`` with the smallest counterexample, the smallest
  chain draft (topk 1) that also writes past, at page size 1 the first committed length that does at
  sglang's own Llama choice, and sglang's ``assign_req_to_token_pool`` run at the counterexample under
  the checked interpreter with the request in the pool's last row.
"""

from __future__ import annotations

import re

import z3

from specbound import spec
from specbound.proofs import core
from specbound.proofs.model import C, D, K, labelled, n, page

from specbound.audit import judge
from specbound.audit.extract import SourceIndex
from specbound.audit.kernels import bind, launch_finding
from specbound.audit.program import Program
from specbound.audit.report import ERROR, MATCHED, OVERRUN, UNKNOWN, Row
from specbound.audit.trace_values import Num, Path, source_text, term_ids
from . import bindings, buffer_replay

KIND = "req_to_token_reservation"
CHECK = ("the req_to_token slots a decode step's reservation writes (kv_committed_len + "
         "get_alloc_reserve_per_decode(), spec.decode_reservation_end) fit the row sglang allocates, for every "
         "request the scheduler keeps decoding")
COMMITTED = z3.Int("kv_committed_len")
REPORTED = (("kv_committed_len", COMMITTED), ("topk", K), ("num_steps", D), ("num_draft_tokens", n),
            ("page_size", page), ("max_context_len", C))
RESERVE_HELPER = "get_alloc_reserve_per_decode"
WRITER = "assign_req_to_token_pool"
WRITER_FILES = ("srt/mem_cache/allocation.py", "srt/speculative/triton_ops/cache_locs.py")
WRITER_FED = {"req_pool_indices", "req_to_token", "start_offset", "end_offset", "out_cache_loc", "pool_len", "bs_upper"}
# (file, pattern): sglang's scheduler bound on the committed length of a request still decoding
SCHEDULER_BOUND = (("srt/managers/tp_worker.py", r"max_req_len\s*=\s*min\(\s*self\.model_config\.context_len\s*-\s*1"),
                   ("srt/managers/scheduler.py", r"self\.max_req_len\s*-\s*input_len\s*-\s*1"))
COMMITTED_SLACK = 3   # kv_committed_len <= C - 3 under SCHEDULER_BOUND
# The reservation rounded up to whole pages (0.5.17 on: eagle_prepare_for_decode, page_aligned_decode_alloc_lens)
PAGE_ALIGNED = (("srt/speculative/", "srt/mem_cache/allocation_sizing.py"),
                r"kv_committed_len\s*\+\s*\w+\s*\+\s*page_size\s*-\s*1\s*\)\s*//\s*page_size")
# speculative_hook._auto_choose_speculative_params for LlamaForCausalLM (and Grok): (steps, topk, tokens)
SGLANG_DEFAULT = {"num_steps": (D, 5), "topk": (K, 4), "num_draft_tokens": (n, 8)}
OVERRUN_WORDS = ("the decode reservation writes past the request's req_to_token row: assign_req_to_token_pool "
                 "stores the reserved slots over the first entries of the next request's row (silent corruption "
                 "of another request's KV mapping: its attention then reads, and its KV writes go to, slots that "
                 "belong to this request; past the pool's last row, an illegal address)")


class Reservation:
    """What every pool site's row is judged against: the reserve's traced paths and the
    scheduler's bound, found once per release (``why``: the reason no row can be judged)."""

    def __init__(self, program: Program, tracer_cls, index: SourceIndex | None, replay: bool):
        self.index, self.replay, self.done, self.judged = index, replay, {}, {}
        self.helper = next(iter(program.functions_named(RESERVE_HELPER)), None)
        self.bound = scheduler_bound(program)
        self.aligned = _first_match(program, *PAGE_ALIGNED)
        self.reserves, self.why = [], ""
        if self.helper is None:
            self.why = (f"no `{RESERVE_HELPER}` in this sglang: its decode reservation (spec v2's first form, "
                        "`ALLOC_LEN_PER_DECODE`) is not judged here; the draft slots it reserves are judged by the "
                        "consumer.req_to_token_row rows")
            return
        tracer = tracer_cls(program, bindings.BINDINGS, bindings.DRAFT_DECODE)
        frame = tracer.top_frame(self.helper, None)
        where = f"{self.helper.rel}:{self.helper.node.lineno}"
        returns = tracer._returns(self.helper, None, {}, frame, Path(trail=(where,)), self.helper.node)
        self.reserves = [(v.term, list(p.conds)) for v, p in returns if isinstance(v, Num)]
        if not self.reserves:
            self.why = f"`{RESERVE_HELPER}` ({where}) was not traced to a number"

    def row(self, fn, call, widths, rule: dict, row_id: str, where: str, layout) -> Row:
        """``layout``: the page-size regime (``req_to_token_row.LAYOUTS``)."""
        subject = (f"{fn.qual} ({where}) -> {source_text(call.func)}(max_context_len=...) -> decode reservation at "
                   f"{layout.words} (kv_committed_len + {RESERVE_HELPER}(), stored by {WRITER})")
        if self.why:
            return Row(row_id, subject, CHECK, "ast", UNKNOWN, self.why)
        if self.bound is None:
            return Row(row_id, subject, CHECK, "ast", UNKNOWN, "sglang's bound on the committed length of a "
                       f"request still decoding was not found ({', '.join(f for f, _ in SCHEDULER_BOUND)})")
        return self._judged(subject, widths, rule, row_id, layout)

    def _judged(self, subject, widths, rule, row_id, layout) -> Row:
        verdicts, untraced, seen = [], 0, set()
        for wv, wconds in ((v, list(p.conds)) for v, p in widths):
            if not isinstance(wv, Num):
                untraced += 1
                continue
            for reserve, rconds in self.reserves:
                key = (term_ids([wv.term, reserve]), term_ids(wconds + rconds), term_ids(rule.values()),
                       layout.suffix)
                if key in seen:
                    continue
                seen.add(key)
                if key not in self.judged:   # pool builders of one release share their width and reserve
                    self.judged[key] = self._judge(wv.term, reserve, wconds + rconds, rule, row_id, layout)
                j = self.judged[key]
                if j.verdict != judge.INFEASIBLE:
                    verdicts.append((j, wv.term, reserve))
                if j.verdict == OVERRUN:   # the row's verdict: the first path written past
                    break
            if verdicts and verdicts[-1][0].verdict == OVERRUN:
                break
        order = [OVERRUN, judge.ERROR, judge.MATCHED]
        verdicts.sort(key=lambda v: order.index(v[0].verdict) if v[0].verdict in order else 1)
        if not verdicts or untraced and verdicts[0][0].verdict != OVERRUN:
            return Row(row_id, subject, CHECK, "ast", UNKNOWN, "the row width was not traced on "
                       f"{untraced} path(s)" if untraced else "no traced path is consistent with the preconditions")
        j, width, reserve = verdicts[0]
        status = {OVERRUN: OVERRUN, judge.MATCHED: MATCHED}.get(j.verdict, ERROR)
        aligned = f"page aligned ({self.aligned})" if self.aligned else "not page aligned"
        detail = j.detail + (f" [row width = {z3.simplify(width)}; reserve = {z3.simplify(reserve)}, {aligned}; "
                             f"committed length bounded by sglang's scheduler: {self.bound}; {len(verdicts)} path(s)]")
        row = Row(row_id, subject, CHECK, "z3", status, detail, j.counterexample, size=j.size, required=j.required)
        if status == OVERRUN and j.counterexample and self.replay and self.index is not None:
            self._replay(row, width, reserve)
        return row

    def _judge(self, width, reserve, conds, rule, name, layout) -> judge.Judgement:
        end = spec.decode_reservation_end(COMMITTED, reserve, page if self.aligned else 1)
        hyps = {**labelled(spec.kv_shape_ok(K, D, page)), **labelled(spec.context_ok(C)),
                "tree_size_positive": n >= 1, layout.label: layout.condition,
                "chain_tree_size": z3.Implies(K == 1, n == D + 1), **rule,
                "committed_nonneg": COMMITTED >= 0, "scheduler_bound": COMMITTED <= C - COMMITTED_SLACK,
                **{f"path_{i}": c for i, c in enumerate(conds)}}
        goal = end <= width
        shown = z3.substitute(end, (page, z3.IntVal(1))) if layout.page_size == 1 else end
        required = f"{z3.simplify(shown)} slots"
        size = str(z3.simplify(width))
        try:
            done = judge.settled(name, goal, hyps, required, size, "proved for every request still decoding, under")
            if done is not None:
                return done
            cex = judge.counterexample(hyps, [], goal, tuple(k for k, _ in REPORTED), reported=REPORTED)
            return judge.Judgement(OVERRUN, required, size, counterexample=cex,
                                   detail=f"refuted for a request the scheduler keeps decoding "
                                          f"(kv_committed_len <= C - {COMMITTED_SLACK}): {OVERRUN_WORDS}; e.g. "
                                          f"{cex}{self._chain(hyps, goal, name)}"
                                          f"{_at_default(width, reserve) if layout.page_size == 1 else ''}")
        except core.Unknown as e:
            return judge.Judgement(judge.ERROR, required, size, detail=f"the solver gave no verdict: {e}")

    @staticmethod
    def _chain(hyps, goal, name) -> str:
        """The smallest chain draft (topk 1) that writes past too: no tree needed."""
        chain = {**hyps, "chain_draft": K == 1}
        if core.satisfy(f"{name}/chain", {**chain, "refuted": z3.Not(goal)}) is None:
            return "; a chain draft (topk 1) stays inside the row"
        cex = judge.counterexample(chain, [], goal, ("num_draft_tokens", "max_context_len", "kv_committed_len"),
                                   reported=REPORTED)
        if cex is None:
            return "; a chain draft (topk 1) writes past the row too"
        return (f"; even a chain draft (topk 1) with num_draft_tokens = {cex['num_draft_tokens']} writes past the row "
                f"of a request with kv_committed_len = C - {cex['max_context_len'] - cex['kv_committed_len']}")

    def _replay(self, row: Row, width, reserve) -> None:
        """sglang's ``assign_req_to_token_pool`` at the counterexample: one request, its row the last
        (only) row of a pool as wide as sglang's, reserving from its committed length to the end."""
        import torch

        cex = row.counterexample
        w, r = judge.evaluate(width, cex, REPORTED), judge.evaluate(reserve, cex, REPORTED)
        start = cex["kv_committed_len"]
        end = spec.decode_reservation_end(start, r, cex["page_size"] if self.aligned else 1)
        case = {"row_width": w, "start": start, "end": end}
        key = tuple(sorted(case.items()))
        if key not in self.done:
            found, kernel, why = buffer_replay.load(self.index, WRITER, WRITER_FILES, {}, WRITER_FED)
            finding = None
            if kernel is not None:
                values = {"req_pool_indices": torch.tensor([0], dtype=torch.int64),
                          "req_to_token": torch.zeros((1, w), dtype=torch.int32),
                          "start_offset": torch.tensor([start], dtype=torch.int64),
                          "end_offset": torch.tensor([end], dtype=torch.int64),
                          "out_cache_loc": torch.arange(end - start, dtype=torch.int64), "pool_len": w, "bs_upper": 1}
                kwargs, _ = bind(found, values, {})
                finding = launch_finding(lambda: kernel[(1,)](**kwargs))
            self.done[key] = (found, finding, why)
        found, finding, why = self.done[key]
        if why:
            row.detail += f"; no replay: {why}"
            return
        buffer_replay.attach(row, f"sglang's {WRITER} ({found.where})", case, finding, "the write")


def _first_match(program: Program, places, pattern) -> str | None:
    """``file:line`` of the first match of ``pattern`` in a file under one of ``places``."""
    index = program.index
    for path in index.files():
        rel = "/" + index.rel(path)
        if any(f"/{place}" in rel for place in places):
            text = index.text(path)
            m = re.search(pattern, text)
            if m is not None:
                return f"{index.rel(path)}:{text.count(chr(10), 0, m.start()) + 1}"
    return None


def scheduler_bound(program: Program) -> str | None:
    """Where sglang bounds the committed length of a request still decoding (SCHEDULER_BOUND), or
    None when a source is missing."""
    found = [_first_match(program, (rel,), pattern) for rel, pattern in SCHEDULER_BOUND]
    if None in found:
        return None
    return ", ".join(found) + f" (kv_committed_len <= C - {COMMITTED_SLACK})"


def _at_default(width, reserve) -> str:
    """From which committed length on a request's reservation passes the row at sglang's own EAGLE
    choice for Llama (SGLANG_DEFAULT), page size 1, when that is a fixed distance from ``C``."""
    at = [(v, z3.IntVal(x)) for v, x in SGLANG_DEFAULT.values()] + [(page, z3.IntVal(1))]
    first = z3.simplify(z3.substitute(C - (width - reserve + 1), *at))   # committed > width - reserve passes
    if not z3.is_int_value(first) or first.as_long() < COMMITTED_SLACK:
        return ""
    text = ", ".join(f"{k} {x}" for k, (_, x) in SGLANG_DEFAULT.items())
    return (f"; at sglang's own choice for Llama (_auto_choose_speculative_params: {text}; page size 1) every "
            f"request with kv_committed_len >= C - {first.as_long()} writes past its row")
