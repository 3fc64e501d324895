"""Consumer rows ``consumer.padded_verify_mask[<class>@<gather>]``: the verify-mask gather of a
topk > 1 target-verify CUDA graph replayed for fewer requests than it was captured for.

The contract (:func:`specbound.spec.verify_mask_extraction_index`,
:func:`specbound.spec.verify_mask_extraction_live`): a graph captured at ``bs`` and replayed for
``raw_bs`` requests pads the rest (``seq_lens = fill``, ``req_pool_indices = 0``, ``positions =
0``).  A backend that builds gather indices from those padded ``seq_lens`` and gathers the real
batch's verify mask, ``<x>.custom_mask[<idx>]``, reads cells past that mask for every padded
row, unless it zeroes ``<idx>`` from ``raw_bs * n * n`` on first; zeroing from earlier drops real
requests' mask entries.

* A *gather* is a subscript ``<x>.custom_mask[<name>]`` in an attention-backend function that
  takes ``bs`` (the captured size: the graph path; the eager path is never padded) and assigns
  ``<name>`` from an expression naming ``seq_lens``.
* Its *guard* is a ``<name>[..., <lo>:].fill_(0)`` (or ``zero_()``) that runs before it on every
  path.  ``<lo>`` is read as a term: ``<x>.positions.numel()`` (also ``.shape[0]``, ``len``) is
  the tree build's positions of the real batch, ``raw_bs * n``; a draft-token count is ``n``;
  ``bs`` the captured size.
* Judged through the core for every ``0 <= raw_bs < bs``, ``n >= 1``: ``matched`` (``lo =
  raw_bs*n*n``); ``crash`` (a padded entry kept, or no guard: the gather's index is past the
  mask, a device-side assert on the GPU, so the server dies); ``diverged`` (a real entry zeroed:
  that request verifies against the wrong mask, silently); ``unknown`` (``lo`` not read).  A
  finding is replayed by torch on the CPU: the real batch's mask gathered at the spec's cells.
"""

from __future__ import annotations

import ast
import time

import z3

from specbound import spec
from specbound.proofs import core
from specbound.proofs.model import bs, n

from specbound.audit.program import Program
from specbound.audit.report import CRASH, DIVERGED, ERROR, MATCHED, UNKNOWN, AuditReport, Row
from .site_trace import attention_nodes, dominating_statements, selves

DRAFT_COUNTS = ("num_draft_tokens", "speculative_num_draft_tokens", "draft_token_num")
RAW_BS = z3.Int("raw_bs")
CHECK = ("the padded rows' verify-mask gather indices are zeroed from "
         "spec.verify_mask_extraction_live(raw_bs, n) on (every padded cell is past the real mask)")
FILL = 1   # the replay's padded seq_len: sglang 0.5.23's fill in every backend but aiter's


def check_padded_verify(program: Program, report: AuditReport) -> None:
    for fn, node, name in gathers(program):
        guard = guard_start(fn.node, node, name)
        where = f"{fn.rel}:{node.lineno}"
        for self_val in selves(program, fn):
            t0 = time.perf_counter()
            owner = self_val.cls.name if self_val is not None else fn.qual
            row_id = f"consumer.padded_verify_mask[{owner}@{where}]"
            subject = (f"{owner} ({where}) -> {ast.unparse(node)[:60]} over a graph padded past raw_bs "
                       f"(seq_lens = fill, req_pool_indices = 0)")
            try:
                row = _judged(row_id, subject, guard)
            except (core.Unknown, ValueError) as e:   # the audit's own failure is an error row
                row = Row(row_id, subject, CHECK, "z3", ERROR, f"the padded-gather check failed: {type(e).__name__}: {e}")
            row.seconds = time.perf_counter() - t0
            report.add(row)


def gathers(program: Program):
    """(function, subscript, index name) of every graph-path gather of a ``custom_mask``."""
    out = []
    for fn, node in attention_nodes(program, "custom_mask", whole_words=False):
        if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute)
                and node.value.attr == "custom_mask" and isinstance(node.slice, ast.Name)
                and isinstance(node.ctx, ast.Load) and "bs" in fn.params()):
            continue
        if node.slice.id in _from_seq_lens(fn.node):
            out.append((fn, node, node.slice.id))
    return out


def _from_seq_lens(func_node) -> set:
    """Local names assigned (in source order) from ``seq_lens`` or from a name that was."""
    tainted = set()
    assigns = sorted((a for a in ast.walk(func_node) if isinstance(a, ast.Assign)), key=lambda a: a.lineno)
    for a in assigns:
        used = {x.id for x in ast.walk(a.value) if isinstance(x, ast.Name)}
        if "seq_lens" in ast.unparse(a.value) or used & tainted:
            tainted |= {t.id for t in a.targets if isinstance(t, ast.Name)}
    return tainted


def guard_start(func_node, gather, name: str):
    """The ``lo`` of the last ``name[..., lo:].fill_(0)`` / ``.zero_()`` before ``gather`` on
    every path, or None."""
    lo = None
    for stmt in dominating_statements(func_node, gather.lineno):
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and (call.func.attr == "zero_" or (call.func.attr == "fill_" and len(call.args) == 1
                                                   and isinstance(call.args[0], ast.Constant)
                                                   and call.args[0].value == 0))):
            continue
        target = call.func.value
        if not (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and target.value.id == name):
            continue
        last = target.slice.elts[-1] if isinstance(target.slice, ast.Tuple) else target.slice
        if isinstance(last, ast.Slice) and last.lower is not None and last.upper is None and last.step is None:
            lo = last.lower
    return lo


def term_of(expr):
    """``expr`` as a term in ``raw_bs``, ``n`` and ``bs``, or None when it is not read."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, int) and not isinstance(expr.value, bool):
        return z3.IntVal(expr.value)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Mult, ast.Add, ast.Sub)):
        left, right = term_of(expr.left), term_of(expr.right)
        if left is None or right is None:
            return None
        return left * right if isinstance(expr.op, ast.Mult) else left + right if isinstance(expr.op, ast.Add) \
            else left - right
    if _names_positions(expr):
        return RAW_BS * n        # the tree build's positions: one per draft token of the real batch
    tail = expr.attr if isinstance(expr, ast.Attribute) else expr.id if isinstance(expr, ast.Name) else ""
    if tail in DRAFT_COUNTS:
        return n
    if tail == "bs":
        return bs
    if tail == "raw_bs":
        return RAW_BS
    return None


def _names_positions(expr) -> bool:
    """``<x>.positions.numel()``, ``<x>.positions.shape[0]`` or ``len(<x>.positions)``."""
    def positions(e):
        return isinstance(e, ast.Attribute) and e.attr == "positions"
    if isinstance(expr, ast.Call) and not expr.args and isinstance(expr.func, ast.Attribute) \
            and expr.func.attr == "numel":
        return positions(expr.func.value)
    if isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Attribute) and expr.value.attr == "shape" \
            and isinstance(expr.slice, ast.Constant) and expr.slice.value == 0:
        return positions(expr.value.value)
    return isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "len" \
        and len(expr.args) == 1 and positions(expr.args[0])


def _judged(row_id, subject, guard) -> Row:
    live = spec.verify_mask_extraction_live(RAW_BS, n)
    if guard is None:
        lo, form = bs * n * n, "no guard: every entry gathered"
    else:
        lo, form = term_of(guard), f"zeroed from `{ast.unparse(guard)}`"
        if lo is None:
            return Row(row_id, subject, CHECK, "ast", UNKNOWN, f"{form}: the start was not read as a term")
    hyps = {"draft_tokens_positive": n >= 1, "padded_graph": z3.And(0 <= RAW_BS, RAW_BS < bs)}
    required, size = f"{z3.simplify(live)} (raw_bs*n*n)", str(z3.simplify(lo))
    try:
        proof = core.check(f"{row_id}/guard", lo == live, hyps=hyps)
        return Row(row_id, subject, CHECK, "z3", MATCHED,
                   f"{form} = {z3.simplify(lo)}: exactly the real requests' entries kept, proved for every "
                   f"0 <= raw_bs < bs, n >= 1 (used: {', '.join(sorted(proof.assumptions)) or 'no assumption'})",
                   required=required, size=size)
    except core.Refuted:
        pass
    for status, bad, effect in (
            (CRASH, lo > live, "a padded row's entry is kept: it gathers a cell past the real batch's mask "
                               "(an index past the tensor: a device-side assert, the server dies)"),
            (DIVERGED, lo < live, "a real request's entry is zeroed: its draft tokens are verified against "
                                  "mask cell 0 instead of its own (silently wrong accept decisions)")):
        m = None
        for shape in ([RAW_BS == 1, n == 2], []):
            m = core.satisfy(f"{row_id}/{status}", {**hyps, "bad": bad}, extra=shape)
            if m is not None:
                break
        if m is None:
            continue
        value = {k: m.model.eval(v, model_completion=True).as_long()
                 for k, v in (("bs", bs), ("raw_bs", RAW_BS), ("num_draft_tokens", n))}
        value["guard_start"] = m.model.eval(lo, model_completion=True).as_long()
        row = Row(row_id, subject, CHECK, "z3", status, f"{form} = {z3.simplify(lo)}: {effect}; e.g. {value}",
                  counterexample=value, required=required, size=size)
        replay_gather(row, value)
        return row
    return Row(row_id, subject, CHECK, "z3", UNKNOWN, "refuted, but no counterexample was found")


def replay_gather(row: Row, x: dict) -> None:
    """torch gathers the real batch's FULL_MASK verify mask (every real request at seq_len 0)
    at the spec's cells for all ``bs`` rows, padded rows at ``seq_len = FILL``, after zeroing
    the indices from the counterexample's guard start."""
    import torch

    count, raw, tokens = x["bs"], x["raw_bs"], x["num_draft_tokens"]
    lens = [0] * raw + [FILL] * (count - raw)
    prefix = [sum(lens[:b]) for b in range(count)]
    idx = torch.tensor([spec.verify_mask_extraction_index(tokens, b, t, j, lens[b], prefix[b])
                        for b in range(count) for t in range(tokens) for j in range(tokens)])
    real = spec.verify_mask_extraction_live(raw, tokens)
    true_cells = idx[:real].clone()
    idx[max(x["guard_start"], 0):] = 0
    mask = torch.arange(1, spec.mask_batch_numel(spec.TreeMaskMode.FULL_MASK, raw, tokens, sum(lens[:raw])) + 1)
    row.replay = {**x, "seq_lens": lens, "mask_numel": int(mask.numel())}
    row.method = "z3 + torch"
    try:
        got = mask[idx]
    except IndexError as e:
        row.detail += f"; torch gather of the {mask.numel()}-cell mask at the padded indices: IndexError: {e}"
        if row.status != CRASH:
            row.status = ERROR   # the model says only real entries are dropped: the audit's model is off
        return
    wrong = int((got[:real] != mask[true_cells]).sum()) if real else 0
    if row.status == DIVERGED and wrong:
        row.detail += f"; torch gather: {wrong} of the {real} real entries read another cell than their own"
        return
    row.detail += "; the torch gather neither raised nor misread a real entry"
    row.status = ERROR   # the model says it fails, torch does not: the audit's model is off
