"""Consumer rows ``consumer.page_table_draft_decode[<class>@<call>]``: the page-table fills of
the draft-decode graph, where a step backend builds its metadata with the offset
``speculative_step_id + 1`` (sglang's TRT-LLM MHA ``update_trtllm_mha_graph_metadata`` with
``seqlen_offset``, FlashAttention's ``normal_decode_set_metadata`` with ``seq_len_delta``).

The rows of :mod:`.consumers` and :mod:`.offset_page_table` judge the same calls but leave this
offset to these rows: it comes from the loop that builds one backend per step
(``for i in range(speculative_num_steps - 1): ...(speculative_step_id=i)``).
``<x>.speculative_step_id`` is the step ``step`` with ``0 <= step <= num_steps - 2``
(:class:`.site_trace.MetadataTracer`), and only the paths whose offset depends on it are
judged here (the other offsets are those rows'),
against :func:`specbound.spec.draft_decode_offset_columns_read`: the kernel reads
``ceil((seq_len + step + 1) / page_size)`` columns of a row of at most the fill's clamp.
Statuses, counterexample and stand-in replay are those of the verify page tables; the
counterexample names the step.
"""

from __future__ import annotations


from specbound import spec
from specbound.proofs.model import D

from specbound.audit.program import Program
from specbound.audit.report import AuditReport
from specbound.audit.trace_values import Num
from .consumers import FILL_PARAMS, PAGE_TABLE_REPORTED, _page_table_rows
from .offset_page_table import OFFSET_FILL_PARAMS, _QWidthTracer
from .site_trace import STEP, MetadataTracer, mentions

REPORTED = PAGE_TABLE_REPORTED + (("step", STEP), ("num_steps", D))


def _uses_step(value) -> bool:
    return isinstance(value, Num) and mentions(value.term, STEP)


def draft_decode_offset_columns_read(seq_len, delta, page_size):
    """:func:`specbound.spec.draft_decode_offset_columns_read` at the traced offset ``delta =
    step + 1`` (named after it: the row's check cites it)."""
    return spec.draft_decode_offset_columns_read(seq_len, delta - 1, page_size)


def check_draft_decode_offsets(program: Program, report: AuditReport) -> None:
    for params, tracer in ((FILL_PARAMS, MetadataTracer), (OFFSET_FILL_PARAMS, _QWidthTracer)):
        for row in _page_table_rows(program, params, tracer, draft_decode_offset_columns_read, kind="page_table_draft_decode",
                                    keep=_uses_step, reported=REPORTED):
            report.add(row)
