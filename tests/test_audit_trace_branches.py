"""The tracer on small sglang-shaped code written here: a value assigned before an ``if`` whose
branch overwrites it reaches a later use only on the path where that branch was skipped (its
test false), so ``w = C; if n is not None: w += n`` gives ``C + n`` alone; a test the tracer
cannot evaluate keeps both.  And :class:`MetadataTracer`'s reading of ``X.max().item()`` of the
lengths given, through slices, casts and locals (sglang's Ascend graph replay)."""

from __future__ import annotations

import ast
from pathlib import Path

import z3

from specbound.audit.extract import SourceIndex
from specbound.audit.program import Program
from specbound.audit.trace_values import Num, Path as TracePath, term_ids
from specbound.engines.sglang import bindings
from specbound.engines.sglang.locate import PACKAGE
from specbound.engines.sglang.site_trace import LONGEST_COMMITTED, MetadataTracer, resolve, selves, traced_allocations
from specbound.engines.sglang.testing import write_sglang_package
from specbound.proofs import core
from specbound.proofs.model import C, n, page

BACKEND = """
import torch


class ToyBackend:
    def __init__(self, model_runner):
        self.max_context_len = model_runner.model_config.context_len
        self.speculative_num_draft_tokens = model_runner.server_args.speculative_num_draft_tokens

    def init_cuda_graph_state(self, max_bs, max_num_tokens):
        width = self.max_context_len
        if {test}:
            width += self.speculative_num_draft_tokens
        self.table = torch.zeros(max_bs, width)

    def read(self, seq_lens_cpu, bs, verify):
        lens = seq_lens_cpu[:bs].int()
        if verify:
            lens = lens + self.speculative_num_draft_tokens
        longest = lens.max().item()
        return self.table, longest
"""


def _program(root: Path, backend: str):
    """The toy backend ``backend`` (source) written as a package: its program, ``read`` and its ``self``."""
    write_sglang_package(root, {"srt/layers/attention/toy_backend.py": backend}, "0.0.0+toy")
    program = Program(SourceIndex(root), PACKAGE)
    path = next(p for p in program.files_mentioning("ToyBackend") if str(p).endswith("toy_backend.py"))
    read = next(f for f in program._functions_in(path, program.index.tree(path)) if f.name == "read")
    return program, read, selves(program, read)[0]


def _tables(root: Path, backend: str) -> list:
    """(allocation, path) of every allocation ``self.table`` traces to in ``read``."""
    program, read, self_val = _program(root, backend)
    return list(traced_allocations(program, read, self_val, ast.parse("self.table", mode="eval").body,
                                   "test").values())


def _widths(root: Path, test: str) -> set:
    return {str(z3.simplify(a.dims[-1])) for a, _ in _tables(root, BACKEND.replace("{test}", test))}


def test_a_value_overwritten_in_a_branch_taken_for_sure_reaches_only_through_it(tmp_path):
    # n is a bound quantity, never None: the path that skips `width += n` does not exist
    assert _widths(tmp_path, "self.speculative_num_draft_tokens is not None") == {str(z3.simplify(C + n))}


def test_a_branch_the_tracer_cannot_decide_keeps_both_values(tmp_path):
    assert _widths(tmp_path, "self.some_flag") == {str(C), str(z3.simplify(C + n))}


def test_the_longest_of_the_lengths_is_read_through_slices_casts_and_locals(tmp_path):
    program, read, self_val = _program(tmp_path, BACKEND.replace("{test}", "True"))
    tracer = MetadataTracer(program, bindings.BINDINGS, bindings.TARGET_VERIFY)
    frame = tracer.top_frame(read, self_val)
    use = next(node.value for node in ast.walk(read.node)
               if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "longest")
    got = {str(z3.simplify(v.term)) for v, _ in resolve(tracer, use, frame, TracePath()) if isinstance(v, Num)}
    assert got == {str(LONGEST_COMMITTED), str(z3.simplify(LONGEST_COMMITTED + n))}


# `a or b` where `a` is a number: Python's value, not a truth value (sglang's
# `spec.speculative_num_steps or 1`, `max_speculative_num_draft_tokens() or 0`).
OR_BACKEND = """
import torch


class ToyBackend:
    def __init__(self, model_runner):
        self.max_context_len = model_runner.model_config.context_len
        self.speculative_num_draft_tokens = model_runner.server_args.speculative_num_draft_tokens

    def init_cuda_graph_state(self, max_bs, max_num_tokens):
        self.table = torch.zeros(max_bs, self.max_context_len + ({operands}))

    def read(self, seq_lens_cpu, bs, verify):
        return self.table, 0
"""


def _or_widths(root: Path, operands: str) -> set:
    return {(str(z3.simplify(a.dims[-1])), tuple(str(c) for c in p.conds))
            for a, p in _tables(root, OR_BACKEND.replace("{operands}", operands))}


def test_or_of_a_number_is_the_number_where_it_is_nonzero_and_the_default_where_it_is_zero(tmp_path):
    assert _or_widths(tmp_path, "self.speculative_num_draft_tokens or 4") == {
        (str(z3.simplify(C + n)), (str(n != 0),)), (str(z3.simplify(C + 4)), (str(z3.Not(n != 0)),))}


def test_and_of_a_number_is_the_first_where_it_is_zero(tmp_path):
    assert _or_widths(tmp_path, "self.speculative_num_draft_tokens and 4") == {
        (str(z3.simplify(C + n)), (str(z3.Not(n != 0)),)),            # n itself, where it is 0
        (str(z3.simplify(C + 4)), (str(z3.Not(z3.Not(n != 0))),))}


NESTED_BACKEND = """
import torch


class ToyBackend:
    def __init__(self, model_runner):
        self.max_context_len = model_runner.model_config.context_len
        self.speculative_num_draft_tokens = model_runner.server_args.speculative_num_draft_tokens
        self.page_size = model_runner.page_size

    def init_cuda_graph_state(self, max_bs, max_num_tokens):
        width = self.max_context_len
        if self.speculative_num_draft_tokens is not None:
            if self.page_size > 1:
                width = width + self.speculative_num_draft_tokens
        self.table = torch.zeros(max_bs, width)

    def read(self, seq_lens_cpu, bs, verify):
        return self.table, 0
"""


def test_a_value_overwritten_two_ifs_deep_reaches_only_where_one_of_their_tests_is_false(tmp_path):
    """sglang 0.5.23's get_req_to_token_extra_context_len: `extra = 4 + n; if spec: if page > 1: extra = max(...)`;
    the first value reaches the return only with page_size <= 1 (n is never None)."""
    by_width = {str(z3.simplify(a.dims[-1])): p.conds for a, p in _tables(tmp_path, NESTED_BACKEND)}
    assert set(by_width) == {str(C), str(z3.simplify(C + n))}
    hyps = {f"path_{i}": c for i, c in enumerate(by_width[str(C)])}
    assert core.satisfy("context_only_at_page_gt_1", {**hyps, "page_gt_1": page > 1}) is None   # never at page > 1


# An assignment in one branch of an `if`/`elif` does not reach a use in another branch (sglang
# 0.5.23's Ascend replay: `if verify: lens = lens + n  elif decode: lens = lens + step + 1`); inside
# a loop it can (one pass runs one branch, the next the other).
ELIF_BACKEND = """
import torch


class ToyBackend:
    def __init__(self, model_runner):
        self.speculative_num_draft_tokens = model_runner.server_args.speculative_num_draft_tokens

    def read(self, seq_lens_cpu, bs, verify, decode):
        lens = seq_lens_cpu[:bs].int()
        {loop}if verify:
        {loop}    lens = lens + self.speculative_num_draft_tokens
        {loop}elif decode:
        {loop}    lens = lens + 1
        longest = lens.max().item()
        return longest
"""


def _longest(root: Path, loop: bool) -> set:
    text = ELIF_BACKEND.replace("{loop}", "    " if loop else "")
    if loop:
        text = text.replace("        lens = seq_lens_cpu[:bs].int()\n",
                            "        lens = seq_lens_cpu[:bs].int()\n        for _ in range(2):\n")
    program, read, self_val = _program(root, text)
    tracer = MetadataTracer(program, bindings.BINDINGS, bindings.TARGET_VERIFY)
    use = next(node.value for node in ast.walk(read.node)
               if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "longest")
    return {str(z3.simplify(v.term)) for v, _ in resolve(tracer, use, tracer.top_frame(read, self_val), TracePath())
            if isinstance(v, Num)}


def test_an_assignment_in_another_branch_of_the_if_does_not_reach(tmp_path):
    one = {str(z3.simplify(t)) for t in (LONGEST_COMMITTED, LONGEST_COMMITTED + n, LONGEST_COMMITTED + 1)}
    assert _longest(tmp_path / "straight", loop=False) == one
    # around a loop the elif branch may read what the if branch wrote on the pass before
    assert str(z3.simplify(LONGEST_COMMITTED + n + 1)) in _longest(tmp_path / "loop", loop=True)


def test_a_term_key_keeps_naming_its_term_after_the_caller_drops_it():
    # Z3 hands a freed term's id to the next term made: a key by bare id would come to name the
    # new term, and a `seen` set of such keys would skip a path it never judged.
    x = z3.Int("x")
    seen = {term_ids([x + 7])}
    other = x * 13
    assert term_ids([other]) not in seen
    assert term_ids([x + 7]) in seen     # equal terms still share a key
