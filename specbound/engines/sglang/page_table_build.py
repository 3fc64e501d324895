"""Consumer rows ``consumer.page_table_write[<class>.<table>@<call>]``: a page table filled on the
device by a length-bounded build (sglang's ``build_trtllm_mha_page_table``, the TRT-LLM MHA
backend's eager path and its ragged target-verify graph path).

The contract (:func:`specbound.spec.page_table_build_columns_stored`): the build's kernel stores
every page of ``cache_seqlens`` a row holds, cut only by a grid of whole blocks over the table's
width, so a row of a table narrower than the request's pages is written past unless the width
is whole blocks.  In target verify ``cache_seqlens = seq_len + n`` (ragged verify: at most
``n`` per request), so the rows judge ``delta = n``.

* A *build* is a module-level function taking ``req_to_token``, ``cache_seqlens``,
  ``page_table`` and ``page_size`` that launches a ``@triton.jit`` kernel of its own file.
* A *site* is a call of a build; when the table it passes is ``<p>.<field>`` with ``<p>`` a
  parameter of the caller (sglang's ``_fill_page_table_device(metadata, ...)``), each call of
  that caller is a site instead, so the rows name where the table is chosen.
* The table is followed to its allocation through the record field it is set on
  (:func:`.site_trace.field_values`), then by the tracer.  ``pages_per_block`` is the kernel's block of
  tokens (a module constant it divides by ``PAGE_SIZE``) over ``page_size``, with ``page_size``
  one of the block's divisors (the build asserts it divides the block); unread, any block.
* Judged like the verify page tables (:func:`.consumers.judge_page_table`): ``matched``, ``holds
  only if seq_len[b] + n <= max_context_len`` or ``overrun``.  A finding is replayed by the
  package's own build (its host function, grid helper and kernel) under the checked interpreter.
"""

from __future__ import annotations

import ast

import z3

from specbound import spec
from specbound.proofs.model import n, page

from specbound.audit import judge
from specbound.audit.extract import Found, is_triton_jit
from specbound.audit.kernels import Unavailable, bind_params, launch_finding, record_replay, triton_env
from specbound.audit.program import Program
from specbound.audit.report import ERROR, HOLDS_ONLY_IF, MATCHED, OVERREAD, OVERRUN, UNKNOWN, AuditReport, Row
from specbound.audit.trace_values import Alloc, Path
from .consumers import PAGE_TABLE_REPORTED, judge_page_table, site_rows
from .site_trace import STEP, STEP_RANGE, call_argument, is_self_attr, mentions, reported_with, selves, \
    traced_tables

BUILD_PARAMS = ("req_to_token", "cache_seqlens", "page_table", "page_size")
TABLE = "page_table"
CLAMP = "max_seq_pages"
LENGTHS = "cache_seqlens"
BLOCK = z3.Int("pages_per_block")
REPORTED = (*PAGE_TABLE_REPORTED, ("pages_per_block", BLOCK))
VERDICT = {judge.MATCHED: MATCHED, judge.HOLDS_ONLY_IF: HOLDS_ONLY_IF, OVERREAD: OVERRUN}
WRITE_PAST = ("the build stores past the row", "makes the build store past its row")


def check_page_table_builds(program: Program, report: AuditReport, replay: bool = True) -> None:
    """``replay``: run the package's build at each finding's counterexample."""
    for build, kernel in _builds(program):
        block = _block_tokens(build, kernel)
        runner = _Build(program, build, kernel) if replay else None
        for fn, call, obj, field, lengths in _sites(program, build):
            where = f"{fn.rel}:{call.lineno}"
            for self_val in selves(program, fn):
                owner = self_val.cls.name if self_val is not None else fn.qual
                site_rows(report, "page_table_write", owner, where, "the page-table build's stores stay in the row",
                          lambda: _rows(program, fn, self_val, owner, where, call, obj, field, build, block, runner,
                                        _delta(program, fn, lengths, call)))


def _builds(program: Program) -> list[tuple[Found, ast.FunctionDef]]:
    """(build, the kernel it launches) of every build in the package."""
    out = []
    for p in program.files_mentioning(BUILD_PARAMS[1]):
        tree = program.index.tree(p)
        if tree is None:
            continue
        jits = {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef) and is_triton_jit(s)}
        for s in tree.body:
            params = [a.arg for a in s.args.args + s.args.kwonlyargs] if isinstance(s, ast.FunctionDef) else []
            # a fill handed a column clamp is judged as a reader (.offset_page_table); a build sizes
            # its grid from the table's own shape
            if not params or s.name in jits or not all(x in params for x in BUILD_PARAMS) or CLAMP in params \
                    or f"{TABLE}.shape" not in ast.unparse(s):
                continue
            launched = [c.func.value.id for c in ast.walk(s) if isinstance(c, ast.Call)
                        and isinstance(c.func, ast.Subscript) and isinstance(c.func.value, ast.Name)
                        and c.func.value.id in jits]
            if launched:
                out.append((Found(s.name, p, program.index.rel(p), s, program.index.text(p), False),
                            jits[launched[0]]))
    return out


def _block_tokens(build: Found, kernel: ast.FunctionDef) -> int | None:
    """The kernel's block in tokens: the module constant ``X`` of ``... = X // PAGE_SIZE``."""
    consts = _constants(ast.parse(build.text), {"tl": _ConstexprStandIn})
    for node in ast.walk(kernel):
        v = getattr(node, "value", None) if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(v, ast.BinOp) and isinstance(v.op, ast.FloorDiv) and isinstance(v.left, ast.Name) \
                and isinstance(v.right, ast.Name) and v.right.id.lower() == "page_size":
            got = getattr(consts.get(v.left.id), "value", consts.get(v.left.id))
            if isinstance(got, int):
                return got
    return None


class _ConstexprStandIn:
    """``tl`` for reading constants without triton: ``tl.constexpr(x)`` is ``x``."""

    @staticmethod
    def constexpr(x):
        return x


def _constants(tree: ast.Module, ns: dict) -> dict:
    """Module-level ``NAME = <expr>`` of ints, names already read and ``tl.constexpr(...)``,
    evaluated into ``ns`` in file order (the globals a kernel reads)."""
    for s in tree.body:
        target = s.targets[0] if isinstance(s, ast.Assign) and len(s.targets) == 1 else \
            s.target if isinstance(s, ast.AnnAssign) and s.value is not None else None
        if not isinstance(target, ast.Name):
            continue
        calls = [c for c in ast.walk(s.value) if isinstance(c, ast.Call)]
        if any(ast.unparse(c.func) != "tl.constexpr" for c in calls):
            continue
        try:
            ns[target.id] = eval(compile(ast.Expression(s.value), "<constant>", "eval"), dict(ns))  # noqa: S307
        except Exception:  # noqa: BLE001 - a constant not read is one the kernel may not need
            continue
    return ns


def _sites(program: Program, build: Found) -> list:
    """(function, call, object, field, lengths) of every site: ``field`` is None when the table
    expression ``object`` is traced as it is; ``lengths`` is the ``cache_seqlens`` expression
    there (None where it is not seen)."""
    out = []
    params = [a for a in build.params() if a != "self"]
    for site in program.calls_to(build.name):
        table, lengths = call_argument(site.call, params, TABLE), call_argument(site.call, params, LENGTHS)
        if table is None:
            continue
        holder = table.value if isinstance(table, ast.Attribute) else None
        caller_params = [a for a in site.caller.params() if a != "self"]
        if isinstance(holder, ast.Name) and holder.id in caller_params:
            for outer in program.calls_to(site.caller.name):
                arg = call_argument(outer.call, caller_params, holder.id)
                outer_lengths = call_argument(outer.call, caller_params, lengths.id) \
                    if isinstance(lengths, ast.Name) and lengths.id in caller_params else None
                if arg is not None and outer.caller.key != site.caller.key:
                    out.append((outer.caller, outer.call, arg, table.attr, outer_lengths))
        elif isinstance(holder, ast.Name):
            out.append((site.caller, site.call, holder, table.attr, lengths))
        else:
            out.append((site.caller, site.call, table, None, lengths))
    return out


def _rows(program, fn, self_val, owner, where, call, obj, field, build, block, runner, delta) -> list[Row]:
    subject = f"{owner} ({where}) -> {build.name} ({build.where}) -> stores cdiv(cache_seqlens, page_size) pages"
    check = (f"the pages the build stores per row (spec.page_table_build_columns_stored, cache_seqlens = seq_len + "
             f"{z3.simplify(delta) if z3.is_expr(delta) else delta}) stay in the table's row")
    found = traced_tables(program, fn, self_val, obj, field, call.lineno, where)
    allocs = [(v, p, label) for v, p, label in found.values() if isinstance(v, Alloc) and len(v.dims) == 2
              and isinstance(v.dims[-1], (int, z3.ArithRef))]
    if not allocs:
        why = "; ".join(sorted({str(v)[:160] for v, _, _ in found.values()})) or "no assignment of it reaches the call"
        return [Row(f"consumer.page_table_write[{owner}@{where}]", subject, check, "ast", UNKNOWN,
                    f"`{ast.unparse(obj)}{'.' + field if field else ''}` was not traced to a 2-D allocation: {why}")]
    return [_judged(owner, where, subject, check, a, p, block, runner, delta, label) for a, p, label in allocs]


def _bare_seq_lens(e) -> bool:
    """``seq_lens`` / ``<x>.seq_lens``, through ``.to(...)`` / ``.int()`` conversions."""
    while isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in ("to", "int", "clone"):
        e = e.func.value
    return (isinstance(e, ast.Name) and e.id == "seq_lens") or (isinstance(e, ast.Attribute) and e.attr == "seq_lens")


def _delta(program: Program, fn, lengths, call) -> object:
    """The draft tokens in the lengths the build is given: 0 when every value the site's
    function puts in them (``x = ...`` other than a view of a buffer of its own, ``x.copy_(...)``)
    is the committed ``seq_lens`` as it is (a prefix-only table); ``step + 1`` when the others are
    ``seq_lens + <x>.speculative_step_id + 1`` (a draft-decode step, ``0 <= step <= num_steps -
    2``); ``n`` otherwise, target verify's ``seq_len + n``, and under a draft-extend test, where
    ``seq_lens`` already holds the drafts.  Values put in another branch of an ``if`` than
    ``call`` are not its."""
    blocks = program.blocks(fn.node)
    if lengths is None or _in_draft_extend(blocks, call):
        return n
    text, values = ast.unparse(lengths), []
    for node in ast.walk(fn.node):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and ast.unparse(node.targets[0]) == text \
                and not _buffer_view(node.value):   # binding a graph buffer: its copy_ gives the values
            value = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "copy_" \
                and node.args and ast.unparse(node.func.value) == text:
            value = node.args[0]
        else:
            continue
        if not blocks.apart(node, call):
            values.append(value)
    if not values:
        return n
    drafted = [v for v in values if not _bare_seq_lens(v)]
    if not drafted:
        return 0
    return STEP + 1 if all(_draft_step_lengths(v) for v in drafted) else n


def _in_draft_extend(blocks, call) -> bool:
    """Whether ``call`` runs only under a test naming ``draft_extend``: there the worker has widened
    ``seq_lens`` by the draft tokens before the backend sees them (:mod:`.draft_extend`)."""
    return any(part == "body" and stmt in blocks.ifs and "draft_extend" in ast.unparse(blocks.ifs[stmt].test)
               for stmt, part in blocks.chain(call) or ())


def _buffer_view(e) -> bool:
    """``self.<buffer>[...]...`` (slices and keys of a backend's own buffer or graph dict)."""
    if not isinstance(e, ast.Subscript):
        return False
    while isinstance(e, ast.Subscript):
        e = e.value
    return is_self_attr(e)


def _draft_step_lengths(e) -> bool:
    """``seq_lens + <x>.speculative_step_id + 1``."""
    return isinstance(e, ast.BinOp) and isinstance(e.op, ast.Add) and isinstance(e.right, ast.Constant) \
        and e.right.value == 1 and isinstance(e.left, ast.BinOp) and isinstance(e.left.op, ast.Add) \
        and _bare_seq_lens(e.left.left) and isinstance(e.left.right, ast.Attribute) \
        and e.left.right.attr == "speculative_step_id"


def _judged(owner, where, subject, check, a: Alloc, path: Path, block, runner, delta, label) -> Row:
    holder = (a.holder or label or a.func.split(".")[-1]).removeprefix("self.")
    row_id = f"consumer.page_table_write[{owner}.{holder}{a.view}@{where}]"
    width = a.dims[-1]
    # the build asserts page_size divides the block: a finite choice, which keeps a width written
    # in whole blocks (a product of page_size terms) decidable
    grid = [BLOCK >= 1] + ([z3.Or([z3.And(page == d, BLOCK == block // d) for d in range(1, block + 1)
                                   if block % d == 0])] if block is not None else [])
    steps = [STEP_RANGE] if mentions(delta, STEP) else []
    reported = reported_with(REPORTED, [delta])
    j = judge_page_table(delta, width, list(path.conds) + grid + steps, row_id,
                         lambda s, d, p: spec.page_table_build_columns_stored(s, d, p, width, BLOCK), reported,
                         past=WRITE_PAST)
    if j.verdict == judge.INFEASIBLE:
        return Row(row_id, subject, check, "z3", UNKNOWN, "no path to the allocation is consistent with the "
                   "preconditions", allocation=f"{a.site} {a.text}")
    status = VERDICT.get(j.verdict, ERROR)
    detail = (f"holds only if {j.condition}: " if j.condition else "") + j.detail
    detail += (f" [width = {z3.simplify(width) if z3.is_expr(width) else width}, the table allocated at {a.site}; "
               f"blocks of " + (f"{block} // page_size pages" if block is not None else "any number of pages") + "]")
    row = Row(row_id, subject, check, "z3", status, detail, j.counterexample, allocation=f"{a.site} {a.text}",
              size=j.size, required=j.required)
    if status in (OVERRUN, HOLDS_ONLY_IF) and j.counterexample and runner is not None:
        runner.replay(row, width, {**j.counterexample, "delta": judge.evaluate(delta, j.counterexample, reported)})
    return row


class _Build:
    """The package's build (host function, its grid helpers, its kernel) defined once under the
    checked interpreter when a row needs it."""

    def __init__(self, program: Program, build: Found, kernel: ast.FunctionDef):
        self.program, self.build, self.kernel, self.loaded, self.why = program, build, kernel, None, ""

    def _load(self):
        if self.loaded is None and not self.why:
            try:
                triton, tl, _ = triton_env()
                import typing

                import torch

                from specbound.kernels import source

                tree = ast.parse(self.build.text)
                ns = _constants(tree, {"triton": triton, "tl": tl, "torch": torch, "Optional": typing.Optional,
                                       "__name__": f"specbound_audit_kernels.{self.build.name}"})
                source.load_jit_functions(self.build.text, str(self.build.path), ns, roots=[self.kernel.name],
                                          jit=is_triton_jit)
                used = {x.id for x in ast.walk(self.build.node) if isinstance(x, ast.Name)}
                for s in tree.body:   # the plain helpers the build calls (its grid size)
                    if isinstance(s, ast.FunctionDef) and s.name in used and not is_triton_jit(s):
                        found = Found(s.name, self.build.path, self.build.rel, s, self.build.text, False)
                        ns[s.name] = self.program.index.load_helper(found, ns)
                self.loaded = self.program.index.load_helper(self.build, ns)
            except Unavailable as e:
                self.why = str(e)
            except Exception as e:  # noqa: BLE001
                self.why = f"cannot define {self.build.name}: {type(e).__name__}: {e}"
        return self.loaded

    def bind(self, feed: dict, row: Row) -> dict | None:
        """The build's keyword arguments from ``feed`` (its optional parameters may be left out);
        None, said in ``row``'s detail, when it takes one the replay does not feed."""
        params = [(a, a not in self.build.required_params()) for a in self.build.params()]
        kwargs, missing = bind_params(params, feed, {})
        if missing:
            row.detail += f"; no replay: {self.build.name} takes {missing}, which the replay does not feed"
            return None
        return kwargs

    def replay(self, row: Row, width, values: dict) -> None:
        """The counterexample's request (``cache_seqlens = seq_len + delta``) built by the package's
        own function into a table of the allocation's width: its last row is the request's."""
        import torch

        build = self._load()
        w = judge.evaluate(width, values, REPORTED)
        if build is None or w is None:
            row.detail += f"; no replay: {self.why or 'the width is not concrete at the counterexample'}"
            return
        bs, length, p = values.get("bs", 1), values["seq_len"] + values["delta"], values["page_size"]
        pages = spec.page_table_columns_read(values["seq_len"], values["delta"], p)
        row_width = max(length, 1)
        feed = {"req_to_token": torch.arange(bs * row_width, dtype=torch.int32).reshape(bs, row_width),
                "req_pool_indices": torch.arange(bs, dtype=torch.int64),
                "cache_seqlens": torch.full((bs,), length, dtype=torch.int32),
                "page_table": torch.zeros((bs, w), dtype=torch.int32), "page_size": p}
        kwargs = self.bind(feed, row)
        if kwargs is None:
            return
        f = launch_finding(lambda: build(**kwargs))
        row.replay = {**values, "width": w, "pages": pages, "cache_seqlens": length}
        record_replay(row, f, f"sglang's {self.build.name}", self.build.where,
                      f"storing {pages} page(s) of a {length}-token request into a {bs} x {w} table")
