"""The audit core knows an engine only through what its adapter hands in: the tracer reads
the :class:`~specbound.audit.engine_bindings.Bindings` it is given (not sglang's, imported),
a binding to a name that is no spec quantity is refused, and the kernel-launch helpers fix
only the misspellings the engine's :class:`~specbound.audit.kernels.Aliases` name."""

from __future__ import annotations

from dataclasses import replace

import pytest
import z3

from specbound.audit.engine_bindings import QUANTITIES, Bindings
from specbound.audit.extract import SourceIndex
from specbound.audit.kernels import value_key
from specbound.audit.program import Program
from specbound.engines.sglang.locate import PACKAGE
from specbound.engines.sglang.testing import write_sglang_package
from specbound.audit.trace import Tracer
from specbound.engines.sglang import bindings as sglang
from specbound.engines.sglang.launch import TREE_ALIASES
from specbound.engines.sglang.sinks import find_sites, trace_site

# The smallest sglang-shaped package with a draft kv buffer: allocated for the CUDA graph from
# ``max_num_tokens`` (a per-runner quantity), launched into the draft kv kernel.
TOY = """
import torch


class ToyBackend:
    def init_cuda_graph_state(self, max_bs, max_num_tokens):
        self.cuda_graph_kv_indices = torch.zeros((max_num_tokens * self.max_context_len,), dtype=torch.int64)

    def launch(self):
        generate_draft_decode_kv_indices[(1,)](kv_indices=self.cuda_graph_kv_indices)
"""


def _graph_buffer_dims(root, bound: Bindings):
    program = Program(SourceIndex(root), PACKAGE)
    (site,) = [s for s in find_sites(program) if s.sink is sglang.KV_SINK]
    dims = {str(z3.simplify(tb.alloc.dims[-1])) for tb in trace_site(Tracer(program, bound, site.sink.role), site)
            if tb.alloc is not None}
    assert dims, "the graph buffer was not traced"
    return dims


def test_the_tracer_sizes_buffers_with_the_bindings_it_is_handed(tmp_path):
    """``max_num_tokens`` is ``max_bs`` times the tokens per request of the calling runner: with
    sglang's bindings ``topk`` for the draft-decode runner, with bindings that say
    ``num_draft_tokens`` the same allocation is sized in ``n``."""
    root = write_sglang_package(tmp_path, {"srt/layers/attention/toy.py": TOY}, "0.0.0+toy")
    assert _graph_buffer_dims(root, sglang.BINDINGS) == {str(z3.simplify(
        QUANTITIES["max_bs"] * QUANTITIES["topk"] * QUANTITIES["max_context_len"]))}
    other = replace(sglang.BINDINGS, tokens_per_request={**sglang.BINDINGS.tokens_per_request,
                                                         sglang.DRAFT_DECODE: "num_draft_tokens"})
    assert _graph_buffer_dims(root, other) == {str(z3.simplify(
        QUANTITIES["max_bs"] * QUANTITIES["num_draft_tokens"] * QUANTITIES["max_context_len"]))}


def test_a_binding_to_no_spec_quantity_is_refused():
    with pytest.raises(ValueError, match=r"Bindings\.attributes: \['topK'\] is not a spec quantity"):
        replace(sglang.BINDINGS, attributes={"speculative_eagle_topk": "topK"})
    with pytest.raises(ValueError, match=r"Bindings\.per_runner/tokens_per_request: \['tokens'\]"):
        replace(sglang.BINDINGS, tokens_per_request={sglang.DRAFT_DECODE: "tokens"})


def test_only_the_engines_own_misspellings_are_fixed():
    """sglang spells ``retrieve`` ``retrive`` in the tree's index buffers: its aliases say so, and
    the neutral helpers fix nothing for an engine whose aliases do not."""
    assert value_key("retrive_next_token_ptr", TREE_ALIASES) == "retrieve_next_token"
    assert value_key("seq_lens", TREE_ALIASES) == "verified_seq_len"
    assert value_key("retrive_next_token_ptr", {}) == "retrive_next_token"
