"""Consumer rows ``consumer.padded_rows[<Backend>.<method>/draft_extend_prefix@...]``: the KV
prefix an attention backend derives for the padded rows of a draft-extend CUDA graph.

The contract (:func:`specbound.spec.padded_draft_extend_prefix_len`): a draft-extend graph
captured at ``bs`` and replayed for fewer requests pads the rest with ``seq_lens = fill``
(the backend's ``get_cuda_graph_seq_len_fill_value()``, 1 in sglang 0.5.23's backends) and
``extend_seq_lens = n`` (the captured q width); a backend that takes the prefix as ``seq_lens
- extend_seq_lens`` must still get a length, ``0 <= len <= fill``, or ``kv_indptr`` runs
backwards and the row spans no longer partition ``kv_indices``.

* A *padding* is a function of ``srt/speculative/`` that fills both ``<x>.seq_lens`` and
  ``<x>.extend_seq_lens`` with ``fill_`` (the graph runner's replay).  Without one no row is made.
* A *site* is a subtraction ``<...>seq_lens - <...>extend_seq_lens`` (or ``- <draft count>``, DSA's
  KPool write start) in an attention-backend function that names ``draft_extend``.  The fill is
  the class's ``get_cuda_graph_seq_len_fill_value`` returns; at a site naming ``kpool``, the
  runner's ``max(fill, captured_req_width + kpool)`` (when found) raises it to at least ``n + 2``.  Its form is read from the expression around it:
  clamped at 0 (``torch.clamp(.., min=0)``, ``.clamp_min(0)``, ``.clamp(min=0)``), the q width
  added back (``+ num_draft_tokens`` / ``window`` / ``max_seq_len_q``, each at least ``n``
  on a padded batch), or bare.  The length is judged through the core for every ``fill >= 1``,
  ``n >= 1``: ``matched``, or ``diverged`` with the smallest counterexample, replayed by
  torch building the rows' owner map from those lengths (``repeat_interleave``), which
  refuses a negative count.
"""

from __future__ import annotations

import ast
import time

import z3

from specbound import spec
from specbound.proofs import core
from specbound.proofs.model import fill, n

from specbound.audit.program import Program
from specbound.audit.report import DIVERGED, ERROR, MATCHED, UNKNOWN, AuditReport, Row
from .site_trace import attention_nodes

# Names a backend adds back to the bare prefix that are at least the padded q width n: the
# draft-token count itself, FlashMLA's fixed q window (= num_draft_tokens), TRT-LLM MLA's
# max over extend_seq_lens_cpu (the padded rows contribute n to that max).
DRAFT_COUNTS = ("num_draft_tokens", "speculative_num_draft_tokens", "captured_req_width")
Q_WIDTHS = (*DRAFT_COUNTS, "window", "max_seq_len_q")
CLAMPS = ("clamp", "clamp_min")
CHECK = "the KV prefix derived for a padded draft-extend row (spec.padded_draft_extend_prefix_len) is a length"
added = z3.Int("q_width_added")


def check_padded_rows(program: Program, report: AuditReport) -> None:
    padding = padding_site(program)
    if padding is None:
        return
    raised = fill_raise_site(program)
    seen, draft_extend_fns = set(), {}
    for fn, node in attention_nodes(program, "draft_extend", whole_words=False):
        if not (_is_prefix(node) and (fn.key, node.lineno, node.col_offset) not in seen):
            continue
        if fn.key not in draft_extend_fns:
            draft_extend_fns[fn.key] = "draft_extend" in ast.unparse(fn.node)
        if not draft_extend_fns[fn.key]:
            continue
        seen.add((fn.key, node.lineno, node.col_offset))
        t0 = time.perf_counter()
        where = f"{fn.rel}:{node.lineno}"
        row_id = f"consumer.padded_rows[{fn.qual}/draft_extend_prefix@{where}]"
        subject = (f"{fn.qual} ({where}) <- padded graph rows (seq_lens = fill, extend_seq_lens = n, "
                   f"req_pool_indices = 0 at {padding})")
        fills, fill_site = backend_fill(program, fn)
        # the runner's raise applies only with a KPool (dsa_index_kpool > 1), which a site naming kpool needs
        kpool = raised is not None and "kpool" in ast.unparse(fn.node)
        subject += f"; fill from {fill_site}" + (f", raised past n + kpool at {raised}" if kpool else "")
        try:
            row = _judged(row_id, subject, _form(fn.node, node), fills, kpool)
        except (core.Unknown, ValueError) as e:   # the audit's own failure is an error row
            row = Row(row_id, subject, CHECK, "z3", ERROR, f"the padded-row check failed: {type(e).__name__}: {e}")
        row.seconds = time.perf_counter() - t0
        report.add(row)


def padding_site(program: Program) -> str | None:
    """``file:line`` of the graph runner's padding of the draft-extend rows, or None."""
    for fn, node in attention_nodes(program, "extend_seq_lens", whole_words=False, folder="/speculative/"):
        if _fills(node, "extend_seq_lens") and any(_fills(x, "seq_lens") for x in ast.walk(fn.node)):
            return f"{fn.rel}:{node.lineno}"
    return None


FILL_METHOD = "get_cuda_graph_seq_len_fill_value"


def backend_fill(program: Program, fn) -> tuple[list, str]:
    """The values the class's ``get_cuda_graph_seq_len_fill_value`` returns, as terms in ``n``
    (an int literal, or ``n`` for a return naming the draft-token count), and where; ``[]`` when
    a return is anything else (the judgement then takes every ``fill >= 1``)."""
    method = program.lookup(fn.cls, FILL_METHOD) if fn.cls is not None else None
    if method is None:
        return [], "no fill method found (any fill >= 1)"
    out = []
    for r in ast.walk(method.node):
        if not isinstance(r, ast.Return) or r.value is None:
            continue
        for x in _returned(r.value):
            if isinstance(x, ast.Constant) and isinstance(x.value, int) and not isinstance(x.value, bool):
                out.append(z3.IntVal(x.value))
            elif _tail(x) in DRAFT_COUNTS:
                out.append(n)
            else:
                return [], f"{method.where} (returns {ast.unparse(r.value)}: any fill >= 1)"
    return out, method.where


def _returned(value) -> tuple:
    """The values a return can give; ``a if <draft count> is None else b`` gives ``b`` in a
    speculative run (the draft count is set whenever there is a draft extend)."""
    if not isinstance(value, ast.IfExp):
        return (value,)
    t = value.test
    if isinstance(t, ast.Compare) and _tail(t.left) in DRAFT_COUNTS and len(t.ops) == 1 \
            and isinstance(t.ops[0], ast.Is) and isinstance(t.comparators[0], ast.Constant) \
            and t.comparators[0].value is None:
        return (value.orelse,)
    return (value.body, value.orelse)


def _fills(node, attr: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "fill_" \
        and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == attr


def _tail(expr) -> str:
    """The name an operand ends in: ``forward_batch.seq_lens[:bs]`` -> ``seq_lens``."""
    while isinstance(expr, ast.Subscript):
        expr = expr.value
    return expr.attr if isinstance(expr, ast.Attribute) else expr.id if isinstance(expr, ast.Name) else ""


def _is_prefix(node) -> bool:
    """``seq_lens - extend_seq_lens``, or ``seq_lens - <draft count>`` (DSA's KPool write start):
    both subtract the padded q width ``n``."""
    return isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub) and _tail(node.left) == "seq_lens" \
        and (_tail(node.right) == "extend_seq_lens" or _tail(node.right) in DRAFT_COUNTS)


def fill_raise_site(program: Program) -> str | None:
    """``file:line`` of the runner raising the draft-extend fill past the draft width and a KPool
    offset (``max(fill, captured_req_width + dsa_index_kpool)`` in a function of
    ``srt/speculative/`` naming ``kpool``), or None."""
    for fn, node in attention_nodes(program, "kpool", whole_words=False, folder="/speculative/"):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "max" \
                and any(isinstance(a, ast.BinOp) and isinstance(a.op, ast.Add)
                        and (_tail(a.left) in DRAFT_COUNTS or _tail(a.right) in DRAFT_COUNTS) for a in node.args):
            return f"{fn.rel}:{node.lineno}"
    return None


def _form(fn_node, site) -> str:
    """``clamped``, ``added`` or ``bare``: what the expression around the subtraction does to it."""
    parents = {id(c): p for p in ast.walk(fn_node) for c in ast.iter_child_nodes(p)}
    child, parent = site, parents.get(id(site))
    while parent is not None:
        if isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Add) and parent.left is child \
                and _tail(parent.right) in Q_WIDTHS:
            return "added"
        call = parents.get(id(parent)) if isinstance(parent, ast.Attribute) else parent
        if isinstance(call, ast.Call) and _clamps_at_zero(call, child):
            return "clamped"
        if isinstance(parent, ast.Attribute) or (isinstance(parent, ast.Call) and parent.func is child):
            child, parent = parent, parents.get(id(parent))   # a method chain on the result: .to(...)
            continue
        return "bare"
    return "bare"


def _clamps_at_zero(call: ast.Call, operand) -> bool:
    zero = [k.value for k in call.keywords if k.arg == "min"] + list(call.args)
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if name not in CLAMPS:
        return False
    on_operand = operand in call.args or (isinstance(func, ast.Attribute) and func.value is operand)
    return on_operand and any(isinstance(z, ast.Constant) and z.value == 0 for z in zero)


def prefix_term(form: str):
    """The prefix a padded row gets (``seq_lens = fill``, ``extend_seq_lens = n``) in ``form``."""
    if form == "clamped":
        return spec.padded_draft_extend_prefix_len(fill, n)
    return fill - n + (added if form == "added" else 0)


def _judged(row_id, subject, form, fills, kpool=False) -> Row:
    got = prefix_term(form)
    goal = got >= 0
    hyps = {"fill_positive": fill >= 1, "draft_tokens_positive": n >= 1, "q_width_added_covers_n": added >= n}
    if kpool:   # max(backend fill, n + kpool) with kpool >= 2
        hyps["fill_raised_past_n_plus_kpool"] = fill >= n + 2
    elif fills:
        hyps["fill_is_the_backends"] = z3.Or([fill == f for f in fills])
    required = "0 <= prefix"
    try:
        proof = core.check(f"{row_id}/length", goal, hyps=hyps)
        under = ", ".join(sorted(proof.assumptions)) or "no assumption"
        return Row(row_id, subject, CHECK, "z3", MATCHED, f"{form}: prefix {z3.simplify(got)} >= 0 proved under {under}",
                   required=required)
    except core.Refuted:
        pass
    # the smallest counterexample, sglang 0.5.23's fill (1) first
    for shape in ([fill == 1, n == 2], [fill == 1], []):
        m = core.satisfy(f"{row_id}/counterexample", {**hyps, "negative": z3.Not(goal)}, extra=shape)
        if m is not None:
            break
    if m is None:
        return Row(row_id, subject, CHECK, "z3", UNKNOWN, "refuted, but no counterexample was found")
    cex = {"bs": 2, "raw_bs": 1, "seq_len_fill": m.model.eval(fill, model_completion=True).as_long(),
           "num_draft_tokens": m.model.eval(n, model_completion=True).as_long()}
    length = cex["seq_len_fill"] - cex["num_draft_tokens"]
    row = Row(row_id, subject, CHECK, "z3", DIVERGED,
              f"{form}: prefix {z3.simplify(got)} is negative for a padded row, kv_indptr runs backwards; "
              f"e.g. {cex}", counterexample=cex, required=required, size=str(length))
    replay_owner_map(row, length)
    return row


def replay_owner_map(row: Row, padded_len: int) -> None:
    """torch builds the kv-entry -> row map of a 2-row graph batch (one real row of 0 prefix
    keys, one padded row of ``padded_len``), as a kernel walking ``kv_indptr`` assumes it."""
    import torch

    row.replay = {**(row.counterexample or {}), "lengths": [0, padded_len]}
    row.method = "z3 + torch"
    try:
        torch.repeat_interleave(torch.arange(2), torch.tensor([0, padded_len]))
    except RuntimeError as e:
        row.detail += f"; torch.repeat_interleave over the rows' lengths [0, {padded_len}]: RuntimeError: {e}"
        return
    row.detail += f"; torch accepted the lengths [0, {padded_len}]"
    row.status = ERROR   # the model says negative, torch does not: the audit's model is off
