"""Consumer rows ``consumer.page_table[<class>@<call>]`` for a fused graph-metadata fill that is
given a ``seqlen_offset`` instead of a ``seq_len_delta`` (sglang's
``update_trtllm_mha_graph_metadata``, the TRT-LLM MHA backend's CUDA-graph path).

The contract (:func:`specbound.spec.offset_page_table_columns_read`): the fill tells the
kernel ``cache_seqlens = seq_len + seqlen_offset`` and writes at most ``max_seq_pages``
columns, so the kernel reads ``ceil((seq_len + seqlen_offset) / page_size)`` columns of a
row of at most that many valid ones.  The judgement, the statuses and the stand-in replay
are those of the verify page tables (:mod:`.consumers`).

* A *fill* is a function taking ``page_table``, ``max_seq_pages`` and ``seqlen_offset``;
  every call of it outside itself is a row, per class that runs the caller.
* ``seqlen_offset`` is traced like any argument, with one reading added: ``<x>.max_seq_len_q``
  is the q width per request of the graph being replayed, which in the target-verify branch
  (the only one where sglang 0.5.23 passes it as the offset) is ``num_draft_tokens``: the
  backend records ``num_tokens // bs`` at capture and the target-verify runner captures
  ``bs * num_draft_tokens`` tokens.  The draft-decode offset ``speculative_step_id + 1`` is a
  loop variable and stays untraced (as in the FlashAttention rows).
"""

from __future__ import annotations

import ast

from specbound import spec
from specbound.proofs.model import n

from specbound.audit.program import Program
from specbound.audit.report import AuditReport
from specbound.audit.trace_values import Num
from .consumers import _page_table_rows
from .site_trace import MetadataTracer

OFFSET_FILL_PARAMS = ("page_table", "max_seq_pages", "seqlen_offset")
Q_WIDTH = "max_seq_len_q"


class _QWidthTracer(MetadataTracer):
    """``<x>.max_seq_len_q`` is the target-verify graph's q width per request, ``n``."""

    def _resolve(self, e, frame, path, receiver):
        if isinstance(e, ast.Attribute) and e.attr == Q_WIDTH and not receiver:
            return [(Num(n), path)]
        return super()._resolve(e, frame, path, receiver)


def check_offset_page_tables(program: Program, report: AuditReport) -> None:
    for row in _page_table_rows(program, OFFSET_FILL_PARAMS, _QWidthTracer, spec.offset_page_table_columns_read):
        report.add(row)
