"""Consumer rows ``consumer.block_table_copy[<class>.<table>@<copy>]``: a graph block table refilled
by copying a strided gather of ``req_to_token`` rows into its first columns (sglang's Ascend
backend in graph replay, every 0.5.x release).

The contract (:func:`specbound.spec.block_table_copy_fits`, theorem ``CT-BLOCK-TABLE-COPY``):
``table[:bs, :k].copy_(req_to_token[rows, 0:L:P] // P)`` runs only when the destination, clipped
to the table (``min(k, W_table)`` columns), and the source, clipped to the row
(:func:`specbound.spec.strided_gather_pages`), have as many columns; otherwise torch raises
inside the graph replay and the server dies.

* A *copy* is a call ``<t>[:<rows>, :<k>].copy_(<g>)`` (or ``<g> // <P>``) in a function of an
  attention backend, ``<g>`` a strided gather (:func:`.clamped_gather.strided_gather`), directly,
  through casts, ``repeat_interleave`` and locals, looked up in an index mapping of the gathered
  slots (the hybrid SWA table, ``block_tables_swa``: the same columns), or unpacked from the tuple
  a method of the backend returns (0.5.22's DCP tables, ``_get_kv_lens_and_block_tables``: the
  gather read in that method with the call's arguments, its step ``page_size * attn_dcp_size``,
  ``attn_dcp_size >= 1``).  ``<k>`` may be the source's own ``shape[1]`` (the destination then
  clipped to the table only).
* The copy's own ``if`` tests are taken first, and two reads are pinned to agree along a path:
  ``<forward_mode>.is_<mode>()`` of a parameter the function never reassigns (the DCP block's
  ``if forward_mode.is_target_verify()`` and the lengths' own), and ``self.is_draft_worker``; a
  draft step (``speculative_step_id``) is the draft worker's, so a copy under ``not
  self.is_draft_worker`` (the DCP tables) reads the target backend's default step, 0.
* ``<t>`` is followed through the metadata record and graph dict to its 2-D allocation
  (:func:`.site_trace.traced_tables`); ``<k>``, ``<L>`` and the step by :class:`CopyTracer`:
  ``X.max().item()`` of the lengths given is ``max(seq_lens)`` plus what ``X`` adds (``n`` in
  target verify, the draft step's ``step + 1`` in draft decode), a batch's longest length
  admitted, ``0 <= max(seq_lens) <= C - 1``; ``max_seq_len_host`` (0.5.23's mirrorless replay:
  "the host-side max of the page-aligned allocated seq lens") is ``max(kv_allocated_len)``, the
  end of a decode reservation (:func:`specbound.spec.decode_reservation_end`) made at a committed
  length ``<= C - 4`` (sglang's scheduler keeps a request decoding up to ``C - 3``, and the
  reservation read is the one of the step before, which committed at least one token) with the
  release's own reserve (:class:`.req_to_token_reservation.Reservation`); ``<x>.shape[1]`` of the
  table is its width, of ``req_to_token`` the row's.
* The ``req_to_token`` row (the source's clip) is any width of at least sglang's least,
  ``spec.req_to_token_row_width(C, n)``, holding the reservation read (a row that does not is
  ``consumer.req_to_token_reservation``'s finding); a finding is checked again for every such
  width, and says whether it depends on it.
* Judged through the core per traced path: ``matched``; ``crash`` when a reservation's end
  (sglang's own allocation, near the context limit) makes the columns differ, or when they differ
  even with the longest request's length within the context; ``holds only if <L> <= C``
  otherwise (a batch's longest request with room for what the pass adds, which sglang does not
  check).  A finding is replayed with torch's ``copy_`` on the CPU at the counterexample.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cached_property

import z3

from specbound import spec
from specbound.proofs import core
from specbound.proofs.model import C, D, K, labelled, n, page

from specbound.audit import judge
from specbound.audit.program import Program
from specbound.audit.report import CRASH, ERROR, HOLDS_ONLY_IF, MATCHED, UNKNOWN, AuditReport, Row
from specbound.audit.trace_values import Alloc, Frame, NoneValue, Num, Path, Truth, bind_call, source_text, term_ids
from . import bindings
from .clamped_gather import last_assignment, strided_gather
from .consumers import site_rows
from .req_to_token_reservation import COMMITTED_SLACK, Reservation
from .req_to_token_row import RowTracer
from .site_trace import LONGEST_COMMITTED, MetadataTracer, attention_nodes, mentions, reported_with, resolve, selves, \
    traced_tables

KIND = "block_table_copy"
CHECK = "the block-table copy's destination and source columns match (spec.block_table_copy_fits)"
ALLOCATED = z3.Int("max(kv_allocated_len)")
ALLOCATED_AT = z3.Int("kv_committed_len at that reservation")
ROW = z3.Int("row_width")
TABLE = z3.Int("table_width")
DCP_SIZE = z3.Int("attn_dcp_size")   # decode context parallelism: the ranks a request's pages are spread over
REPORTED = (("max(seq_lens)", LONGEST_COMMITTED), ("max(kv_allocated_len)", ALLOCATED),
            ("kv_committed_len at that reservation", ALLOCATED_AT), ("topk", K), ("num_draft_tokens", n),
            ("page_size", page), ("attn_dcp_size", DCP_SIZE), ("max_context_len", C), ("row_width", ROW))
# sglang's documented MTP setting for DeepSeek (steps 3, topk 1, 4 draft tokens), an Ascend page of 128
NPU_CHOICE = {"num_steps": (D, 3), "topk": (K, 1), "num_draft_tokens": (n, 4), "page_size": (page, 128),
              "max_context_len": (C, 131072)}
CRASH_WORDS = ("copy_ raises on the column mismatch inside the graph replay: the server dies (a RuntimeError, "
               "no corruption)")


class CopyTracer(MetadataTracer):
    """:class:`.site_trace.MetadataTracer`, plus the reads this copy's sizes make:
    ``max_seq_len_host`` is ``ALLOCATED`` or None; ``<table>.shape[1]`` is ``TABLE`` and
    ``<...>.req_to_token.shape[1]`` is ``ROW``."""

    table_text = ""

    def _resolve(self, e, frame, path, receiver):
        if not receiver and isinstance(e, ast.Attribute) and e.attr == "attn_dcp_size":
            return [(Num(DCP_SIZE), path)]
        choice = None if receiver else _worker_test(e)
        if choice is not None:
            return self.chosen(path, choice)
        if not receiver and isinstance(e, ast.Attribute) and e.attr == "speculative_step_id":
            # a draft step is the draft worker's: the target worker's backend keeps the default
            # step 0 (`speculative_step_id: int = 0`), which a path that tested `not
            # self.is_draft_worker` (the DCP block) reads
            worker = self._pinned(path, WORKER)
            if worker is not None and not worker.term:
                return [(Num(z3.IntVal(0)), path)]
            path = path if worker is not None else self._pin(path, WORKER, Truth(True))
        if not receiver:
            if (isinstance(e, ast.Name) and e.id == "max_seq_len_host") or \
                    (isinstance(e, ast.Attribute) and e.attr == "max_seq_len_host"):
                # a mirrorless replay is handed the longest allocation; other replays, None (one
                # value per path, so its `is not None` test and its uses agree)
                pinned = self._pinned(path, ("max_seq_len_host",))
                if pinned is not None:
                    return [(pinned, path)]
                return [(v, self._pin(path, ("max_seq_len_host",), v)) for v in (Num(ALLOCATED), NoneValue())]
            shaped = _width_of(e)
            if shaped is not None:
                if source_text(shaped).endswith("req_to_token"):
                    return [(Num(ROW), path)]
                if source_text(shaped) == self.table_text:
                    return [(Num(TABLE), path)]
        return super()._resolve(e, frame, path, receiver)


WORKER = ("self.is_draft_worker",)


def _worker_test(e):
    """The pin key of ``self.is_draft_worker`` (one worker runs one call), else None."""
    if isinstance(e, ast.Attribute) and e.attr == "is_draft_worker" and isinstance(e.value, ast.Name) \
            and e.value.id == "self":
        return WORKER
    return None


def _width_of(e):
    """``X`` of ``X.shape[1]``, else None."""
    if isinstance(e, ast.Subscript) and isinstance(e.value, ast.Attribute) and e.value.attr == "shape" \
            and isinstance(e.slice, ast.Constant) and e.slice.value == 1:
        return e.value.value
    return None


class _Release:
    """What every copy of one release is judged with: the decode reservation (traced once, when
    a copy reads ``max_seq_len_host``) and the judgements made (two backend classes share a
    method)."""

    def __init__(self, program: Program, replay: bool):
        self.program, self.replay, self.judged, self.opt_outs = program, replay, {}, {}

    @cached_property
    def reservation(self) -> Reservation:
        return Reservation(self.program, RowTracer, None, replay=False)

    def mirror_opt_outs(self, rel: str) -> str:
        """:func:`mirror_opt_outs` of ``rel``, once (two backend classes share a file)."""
        if rel not in self.opt_outs:
            self.opt_outs[rel] = mirror_opt_outs(self.program, rel)
        return self.opt_outs[rel]


def check_block_table_copies(program: Program, report: AuditReport, replay: bool = True) -> None:
    """``replay``: run the copy with torch at each finding's counterexample."""
    release = _Release(program, replay)
    for fn, node in attention_nodes(program, "req_to_token"):
        site = _copy(fn, node)
        if site is None:
            continue
        where = f"{fn.rel}:{node.lineno}"
        for self_val in selves(program, fn):
            owner = self_val.cls.name if self_val is not None else fn.qual
            site_rows(report, KIND, owner, where, CHECK,
                      lambda: _rows(release, fn, self_val, node, site, owner, where))


def _copy(fn, node):
    """(table expression, column bound or ``SOURCE_WIDTH``, gather) of ``<t>[:<rows>, :<k>].copy_(<g>)``."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "copy_"
            and len(node.args) == 1):
        return None
    dest = node.func.value
    if not (isinstance(dest, ast.Subscript) and isinstance(dest.slice, ast.Tuple) and len(dest.slice.elts) == 2):
        return None
    cols = dest.slice.elts[1]
    if not (isinstance(cols, ast.Slice) and cols.lower is None and cols.step is None and cols.upper is not None):
        return None
    gather = _source_gather(node.args[0], fn.node, node.lineno)
    if gather is None or (isinstance(gather, tuple) and gather[0] is None):
        return None
    return dest.value, _bound_or_source(fn.node, cols.upper, node.args[0], node.lineno), gather


SOURCE_WIDTH = "the source's own width"


def _bound_or_source(fn_node, upper, src, line: int):
    """``SOURCE_WIDTH`` where the column bound is ``<src>.shape[1]`` (directly or through a
    local: DCP's ``table[:, :g.shape[1]].copy_(g)``), else the bound's expression."""
    bound = upper
    if isinstance(upper, ast.Name):
        found = last_assignment(fn_node, upper.id, line)
        bound = found.value if found is not None else upper
    shaped = _width_of(bound)
    return SOURCE_WIDTH if shaped is not None and source_text(shaped) == source_text(src) else upper


@dataclass(frozen=True)
class Returned:
    """A copy's source is element ``index`` of what ``self.<method>(...)`` returns (``call``):
    its gather is read in that method, with the call's arguments."""
    call: ast.Call
    index: int


def _source_gather(src, fn_node, line: int, depth: int = 0):
    """(length, step) of the strided gather a copy's source holds: through ``// P``, casts and
    ``repeat_interleave`` (more rows, the same columns), a local assigned before, and an index
    mapping looked up at the gathered slots (the hybrid SWA table's
    ``full_to_swa_index_mapping[<slots>]``, of the slots' shape); a :class:`Returned` where the
    local is unpacked from a method's returned tuple (DCP's ``_get_kv_lens_and_block_tables``);
    else None."""
    if depth > 6:
        return None
    if isinstance(src, ast.BinOp) and isinstance(src.op, ast.FloorDiv):
        return _source_gather(src.left, fn_node, line, depth + 1)
    if _keeps_columns(src):
        return _source_gather(src.func.value, fn_node, line, depth + 1)
    if isinstance(src, ast.Name):
        found = last_assignment(fn_node, src.id, line, unpacked=True)
        if found is None:
            return None
        if not any(isinstance(t, ast.Name) and t.id == src.id for t in found.targets):
            return _returned(found, src.id)
        return _source_gather(found.value, fn_node, found.lineno, depth + 1)
    gather = strided_gather(src)
    if gather is not None or not isinstance(src, ast.Subscript):
        return gather
    if not isinstance(src.slice, (ast.Tuple, ast.Slice)):   # mapping[<slots>]
        return _source_gather(src.slice, fn_node, line, depth + 1)
    inner = src.value    # mapping[<slots>][:, ::P]: the strided slice of the slots
    if isinstance(inner, ast.Subscript) and not isinstance(inner.slice, (ast.Tuple, ast.Slice)):
        return _source_gather(ast.Subscript(value=inner.slice, slice=src.slice, ctx=ast.Load()), fn_node, line,
                              depth + 1)
    return None


CASTS = ("to", "int", "long", "clone", "contiguous")


def _keeps_columns(e) -> bool:
    """A cast of a tensor, or ``repeat_interleave`` along its rows (``dim=0``: DCP's speculative
    table repeats each request's row once per draft token): the same columns."""
    if not (isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute)):
        return False
    if e.func.attr in CASTS:
        return True
    dim = next((k.value for k in e.keywords if k.arg == "dim"), e.args[1] if len(e.args) > 1 else None)
    return e.func.attr == "repeat_interleave" and isinstance(dim, ast.Constant) and dim.value == 0


def _returned(assign, name: str):
    """A :class:`Returned` for ``(.., name, ..) = self.<method>(...)``, else None."""
    call = assign.value
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            and isinstance(call.func.value, ast.Name) and call.func.value.id == "self"):
        return None
    index = next(i for i, t in enumerate(assign.targets[0].elts) if isinstance(t, ast.Name) and t.id == name)
    return Returned(call, index)


def _helper_gathers(program: Program, self_val, returned: Returned) -> list | None:
    """(method, length, step) of every ``return`` of the called method whose tuple's element at
    ``returned.index`` holds a strided gather (read in that method); [] where the method reads
    ``req_to_token`` but none is recognised; None where it never reads the row (a copy of
    something else: no row)."""
    func = None if self_val is None else program.lookup(self_val.cls, returned.call.func.attr)
    if func is None or not any(isinstance(x, ast.Attribute) and x.attr == "req_to_token"
                               for x in program.walk(func.node)):
        return None
    out = []
    for r in program.walk(func.node):
        if isinstance(r, ast.Return) and isinstance(r.value, ast.Tuple) and len(r.value.elts) > returned.index:
            gather = _source_gather(r.value.elts[returned.index], func.node, r.lineno)
            if isinstance(gather, tuple) and gather[0] is not None:
                out.append((func, *gather))
    return out


def _rows(release: _Release, fn, self_val, node, site, owner, where) -> list[Row]:
    table, cols, gather = site
    program = release.program
    subject = f"{owner} ({where}) -> {ast.unparse(node)[:160]}"
    helper = _helper_gathers(program, self_val, gather) if isinstance(gather, Returned) else None
    if isinstance(gather, Returned) and helper is None:
        return []
    obj, field = (table.value, table.attr) if isinstance(table, ast.Attribute) else (table, None)
    found = traced_tables(program, fn, self_val, obj, field, node.lineno, where, tracer_cls=CopyTracer)
    allocs = [(v, p, label) for v, p, label in found.values() if isinstance(v, Alloc) and len(v.dims) == 2
              and isinstance(v.dims[-1], (int, z3.ArithRef))]
    if not allocs:
        return [Row(f"consumer.{KIND}[{owner}@{where}]", subject, CHECK, "ast", UNKNOWN,
                    f"`{ast.unparse(table)}` was not traced to a 2-D allocation")]
    if helper == []:
        return [Row(f"consumer.{KIND}[{owner}@{where}]", subject, CHECK, "ast", UNKNOWN,
                    f"`{ast.unparse(gather.call.func)}` reads req_to_token, but no strided gather of it was found in "
                    f"what it returns")]
    tracer = CopyTracer(program, bindings.BINDINGS, bindings.TARGET_VERIFY)
    tracer.table_text = source_text(table)
    frame = tracer.top_frame(fn, self_val)
    gathers = [(_callee(frame, func, gather.call), length, step) for func, length, step in helper] \
        if helper is not None else [(frame, *gather)]
    paths, untraced = [], set()
    for where_read, length, step in gathers:
        for start in tracer.reaching(frame, node, Path()):
            _read(tracer, frame, where_read, length, step, cols, start, paths, untraced)
    return [_row(release, owner, where, subject, a, p, label, paths, untraced) for a, p, label in allocs]


def _read(tracer, frame, where_read, length, step, cols, start, paths, untraced) -> None:
    """Each (length, columns, step, path) the copy reads along ``start`` into ``paths``; what is not
    a number into ``untraced``."""
    for lv, lp in resolve(tracer, length, where_read, start):
        for sv, sp in resolve(tracer, step, where_read, lp):
            col_values = [(None, sp)] if cols == SOURCE_WIDTH else resolve(tracer, cols, frame, sp)
            for kv, kp in col_values:
                bad = next((v for v in (lv, kv, sv) if v is not None and not isinstance(v, Num)), None)
                if bad is not None:
                    untraced.add(str(getattr(bad, "reason", bad))[:120])
                    continue
                k = spec.strided_gather_pages(lv.term, sv.term, ROW) if kv is None else kv.term
                paths.append((lv.term, k, sv.term, kp))


def _callee(frame: Frame, func, call: ast.Call) -> Frame:
    """The frame of ``func`` called at ``call`` from ``frame`` (its arguments read there)."""
    args = bind_call(func, call, frame, method=True)
    if isinstance(args, str):
        raise ValueError(args)
    return Frame(func, frame.self_val, args, f"{frame.key}>{func.rel}:{func.node.lineno}@{call.lineno}",
                 frame.depth + 1)


def _row(release: _Release, owner, where, subject, a: Alloc, path, label, paths, untraced) -> Row:
    holder = (a.holder or label or a.func.split(".")[-1]).removeprefix("self.")
    row_id = f"consumer.{KIND}[{owner}.{holder}@{where}]"
    width = a.dims[-1]
    judged, seen, why = [], set(), set()
    for length, cols, step, p in paths:
        conds = [*path.conds, *p.conds]
        ident = (term_ids([length, cols, step, width]), term_ids(conds))
        if ident in seen:
            continue
        seen.add(ident)
        for j in _judged(release, ident, row_id, length, cols, step, width, conds, full=False):
            if isinstance(j, str):
                why.add(j)
            elif j.verdict != judge.INFEASIBLE:
                judged.append((j, length, cols, step, ident, conds))
    allocation = f"{a.site} {a.text}"
    order = [CRASH, judge.ERROR, judge.HOLDS_ONLY_IF, judge.MATCHED]
    judged.sort(key=lambda e: order.index(e[0].verdict) if e[0].verdict in order else 1)
    if (untraced or why) and not any(e[0].verdict in (CRASH, judge.HOLDS_ONLY_IF) for e in judged):
        return Row(row_id, subject, CHECK, "ast", UNKNOWN, "not judged: " + "; ".join(sorted(untraced | why)),
                   allocation=allocation)
    if not judged:
        return Row(row_id, subject, CHECK, "ast", UNKNOWN, "no path to the copy is consistent with the preconditions",
                   allocation=allocation)
    j, length, cols, step, ident, conds = judged[0]
    if j.verdict in (CRASH, judge.HOLDS_ONLY_IF):   # its counterexample, found for the row's path only
        j = next(f for f in _judged(release, ident, row_id, length, cols, step, width, conds, full=True)
                 if not isinstance(f, str) and f.verdict == j.verdict)
    status = {CRASH: CRASH, judge.HOLDS_ONLY_IF: HOLDS_ONLY_IF, judge.MATCHED: MATCHED}.get(j.verdict, ERROR)
    detail = (f"holds only if {j.condition}: " if j.condition else "") + j.detail
    detail += f" [length L = {_shown(length)}, columns k = {_shown(cols)}; the table allocated at {a.site}]"
    if status in (CRASH, HOLDS_ONLY_IF) and mentions(length, ALLOCATED):
        detail += f"; {release.mirror_opt_outs(where.rsplit(':', 1)[0])}"
    others = sorted({f"L = {_shown(e[1])}: {e[0].verdict}" for e in judged[1:]})
    if others:
        detail += " | other paths: " + "; ".join(others)
    row = Row(row_id, subject, CHECK, "z3", status, detail, j.counterexample, allocation=allocation,
              size=j.size, required=j.required)
    if status in (CRASH, HOLDS_ONLY_IF) and j.counterexample and release.replay:
        _replay(row, length, cols, step, width, j.counterexample)
    return row


def mirror_opt_outs(program: Program, rel: str) -> str:
    """Where the backend file ``rel`` opts out of the host copy of ``seq_lens``
    (``<x>.needs_cpu_seq_lens = False``) and under which tests: the only configurations whose
    graph replay is handed ``max_seq_len_host`` instead of the lengths."""
    found = []
    for fn, node in attention_nodes(program, "needs_cpu_seq_lens"):
        if fn.rel == rel and isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Attribute) and node.targets[0].attr == "needs_cpu_seq_lens" \
                and isinstance(node.value, ast.Constant) and node.value.value is False:
            blocks = program.blocks(fn.node)
            tests = [("" if field == "body" else "not ") + f"`{ast.unparse(blocks.ifs[i].test)[:90]}`"
                     for i, field in blocks.chain(node) or () if i in blocks.ifs]
            found.append(f"{rel}:{node.lineno}" + (f" under {' and '.join(tests)}" if tests else ""))
    if not found:
        return ("no opt-out of the host copy of seq_lens found in this file: the branch runs wherever a caller "
                "passes max_seq_len_host without seq_lens_cpu")
    return ("this replay runs only without a host copy of seq_lens, which the backend gives up at "
            + "; ".join(found))


def _judged(release: _Release, ident, name, length, cols, step, width, conds, full: bool) -> list:
    """:func:`_judgements`, once per release (two backend classes share a method)."""
    if (ident, full) not in release.judged:
        release.judged[ident, full] = _judgements(release, name, length, cols, step, width, conds, full)
    return release.judged[ident, full]


def _shown(t) -> str:
    return " ".join(str(z3.simplify(t) if z3.is_expr(t) else t).split())


def _judgements(release: _Release, name, length, cols, step, width, conds, full: bool) -> list:
    """One judgement per reading of the lengths (per traced reserve where the copy reads an
    allocated length, up to the first that crashes); a string where a reading cannot be made.
    ``full``: with a counterexample (else the verdict alone)."""
    base = {**labelled(spec.context_ok(C)), **labelled(spec.tree_shape_ok(K, D, n)),
            "page_size_positive": page >= 1, "step_positive": step >= 1, "table_width": TABLE == width,
            "row_at_least_sglang_least": ROW >= spec.req_to_token_row_width(C, n),
            "chain_tree_size": z3.Implies(K == 1, n == D + 1),   # sglang's rule for a chain draft
            **{f"path_{i}": c for i, c in enumerate(conds)}}
    terms = [length, cols, step, width]
    if mentions_any(terms, DCP_SIZE):
        base["dcp_ranks_positive"] = DCP_SIZE >= 1
    if mentions_any(terms, LONGEST_COMMITTED):
        base.update(longest_length_nonneg=LONGEST_COMMITTED >= 0, longest_length_admitted=LONGEST_COMMITTED <= C - 1)
    if not mentions_any(terms, ALLOCATED):
        return [_judge(name, length, cols, step, width, base, allocated=False, full=full)]
    res = release.reservation
    if res.why or res.bound is None:
        return [f"`max_seq_len_host` is a decode reservation's end, not bounded here: "
                f"{res.why or 'sglang scheduler bound not found'}"]
    out = []
    for reserve, rconds in res.reserves:
        end = spec.decode_reservation_end(ALLOCATED_AT, reserve, page if res.aligned else 1)
        hyps = {**base, "reservation_end": ALLOCATED == end,
                "reserved_while_decoding": z3.And(ALLOCATED_AT >= 0, ALLOCATED_AT <= C - COMMITTED_SLACK - 1),
                "row_holds_reservation": ROW >= ALLOCATED,
                **{f"reserve_path_{i}": c for i, c in enumerate(rconds)}}
        note = (lambda hyps=hyps, reserve=reserve:
                f"{_at_npu_choice(name, length, cols, step, hyps)}; max(kv_allocated_len) is the end of a "
                f"reservation of {_shown(reserve)} slots ("
                f"{'page aligned, ' + res.aligned if res.aligned else 'not page aligned'}) made at "
                f"kv_committed_len <= C - {COMMITTED_SLACK + 1} ({res.bound})")
        out.append(_judge(name, length, cols, step, width, hyps, allocated=True, full=full, note=note))
        if out[-1].verdict == CRASH:   # the row's verdict: the first reserve that crashes
            break
    return out


def mentions_any(terms, var) -> bool:
    return any(mentions(t, var) for t in terms)


def _judge(name, length, cols, step, width, hyps, allocated: bool, full: bool, note=lambda: "") -> judge.Judgement:
    """``full``: with the counterexample and what it shows (``note()`` appended to a crash's detail)."""
    goal = spec.block_table_copy_fits(cols, length, step, TABLE, ROW)
    required = f"{_shown(spec.strided_gather_pages(length, step, ROW))} source columns"
    size = f"min({_shown(cols)}, {_shown(width)}) destination columns"
    reported = _reported(hyps, [length, cols, step, width])
    source = spec.strided_gather_pages(length, step, ROW)
    try:
        done = judge.settled(name, goal, hyps, required, size, "proved for all inputs under")
        if done is not None:
            return done
        verdict = _verdict(name, goal, hyps, length, allocated, required, size)
        if not full:
            return verdict
        cex = judge.counterexample(hyps, [], goal, tuple(k for k, _ in reported), reported=reported,
                                   prefs=[n >= 2, source >= 2])   # one source column would broadcast
        cex = {"bs": 1, **cex} if cex is not None else None
        shown = f"{cex}{_for_every_row(name, goal, hyps, cex, reported)}"
        if allocated:
            detail = (f"refuted for a request sglang's scheduler keeps decoding, once its decode reservation reaches "
                      f"past the context: {CRASH_WORDS}; e.g. {shown}{note()}")
        elif verdict.verdict == CRASH:
            detail = f"refuted even with the longest request's length within the context: {CRASH_WORDS}; e.g. {shown}"
        else:
            detail = (f"a batch whose longest request is admitted below the context but has no room for what the "
                      f"pass adds: {CRASH_WORDS}; e.g. {shown}")
        return judge.Judgement(verdict.verdict, required, size, counterexample=cex, condition=verdict.condition,
                               detail=detail)
    except core.Unknown as e:
        return judge.Judgement(judge.ERROR, required, size, detail=f"the solver gave no verdict: {e}")


def _at_npu_choice(name, length, cols, step, hyps) -> str:
    """The first committed length whose reservation crashes the copy at sglang's recommended MTP
    setting for DeepSeek (NPU_CHOICE) with a 128-token page and a 128K context."""
    pinned = {f"at_{k}": v == x for k, (v, x) in NPU_CHOICE.items()}
    goal = spec.block_table_copy_fits(cols, length, step, TABLE, ROW)
    names = ("kv_committed_len at that reservation", "row_width")
    cex = judge.counterexample({**hyps, **pinned}, [], goal, names, reported=REPORTED, prefs=[])
    if cex is None:
        return ""
    # The source's columns only grow with the row, the destination's do not: the smallest row
    # width that crashes bounds every one that does.
    (at, width), context = (cex[k] for k in names), NPU_CHOICE["max_context_len"][1]
    words = ", ".join(f"{k} {x}" for k, (_, x) in NPU_CHOICE.items())
    return (f"; at {words}: the step after a reservation made at kv_committed_len = {at} (C - {context - at}) "
            f"crashes whenever the req_to_token row is at least {width} (C + {width - context}) wide")


def _reported(hyps: dict, terms) -> tuple:
    """The quantities a counterexample shows: the sizes', the configuration's, and the draft
    step's or the reservation's where the copy reads them."""
    terms = [*terms, *hyps.values()]
    always = {"num_draft_tokens", "page_size", "max_context_len", "row_width"}
    return reported_with(tuple((k, v) for k, v in REPORTED if k in always or mentions_any(terms, v)), terms)


def _verdict(name, goal, hyps, length, allocated: bool, required, size) -> judge.Judgement:
    """A refuted copy's verdict without its counterexample: crash where the allocation is read or
    the columns differ even with room; holds only if, otherwise."""
    if not allocated:
        try:
            core.check(f"{name}/fits_with_room", goal, hyps={**hyps, "request_room": length <= C})
        except core.Refuted:
            pass
        else:
            return judge.Judgement(judge.HOLDS_ONLY_IF, required, size,
                                   condition=f"{_shown(length)} <= max_context_len")
    return judge.Judgement(CRASH, required, size)


def _for_every_row(name, goal, hyps, cex, reported) -> str:
    """Whether the counterexample fails for every row width the hypotheses admit, its other
    quantities fixed (then the row's exact headroom does not matter)."""
    if cex is None:
        return ""
    pinned = {f"at_{k}": v == cex[k] for k, v in reported if k in cex and k != "row_width"}
    try:
        core.check(f"{name}/every_row", z3.Not(goal), hyps={**hyps, **pinned})
    except core.Refuted:
        return f" (at a row width of {cex['row_width']}; a row of another width can fit)"
    return " (whatever the req_to_token row's width, from sglang's least up)"


def _replay(row: Row, length, cols, step, width, values: dict) -> None:
    """The copy with torch on the CPU at the counterexample: a table of the allocation's width, a
    ``req_to_token`` row of the counterexample's width, sglang's slice and ``copy_``."""
    import torch

    reported = _reported({}, [length, cols, step, width])
    ev = {"Wt": judge.evaluate(width, values, reported), "W": values.get("row_width")}
    at = {**values, "table_width": ev["Wt"]}
    widths = (*reported, ("table_width", TABLE))
    ev.update({k: judge.evaluate(t, at, widths) for k, t in (("L", length), ("k", cols), ("P", step))})
    if any(v is None for v in ev.values()):
        row.detail += "; no replay: a size is not concrete at the counterexample"
        return
    table = torch.zeros(1, ev["Wt"], dtype=torch.int32)
    rows = torch.zeros(1, ev["W"], dtype=torch.int32)
    row.method, row.replay = "z3 + torch", {**values, **ev}
    try:
        table[:1, : ev["k"]].copy_(rows[torch.zeros(1, dtype=torch.long), 0: ev["L"]: ev["P"]] // ev["P"])
    except RuntimeError as e:
        row.detail += (f"; replayed with torch: table[:1, :{ev['k']}].copy_(req_to_token[rows, 0:{ev['L']}:{ev['P']}]) "
                       f"into a table {ev['Wt']} wide from a row {ev['W']} wide raises RuntimeError: "
                       f"{str(e).splitlines()[0]}")
        return
    row.detail += "; the torch replay did not raise"
    row.status = ERROR   # the model says it raises, torch does not: the audit's own model is off
