"""What the engine-neutral tracer (:mod:`.trace`) and judge (:mod:`.judge`) ask of an engine:
how it spells the spec's quantities, which calls allocate a buffer, and what it relies on
beyond the spec's preconditions.  One :class:`Bindings` per engine, built by its adapter
(sglang's: :mod:`specbound.engines.sglang.bindings`) and passed in; nothing here names an
engine.

The tracer evaluates an allocation's shape in the engine's own terms; a name it cannot trace
to an assignment is looked up in the bindings, and one that is neither traced nor bound stays
unknown (never a guess).  Three kinds of entry, each naming one of :data:`QUANTITIES`:

* ``parameters``: a function parameter of that name, never a local assigned in the function
  (a local is traced to its assignment);
* ``attributes``: ``<anything>.name``;
* ``expressions``: an expression as ``ast.unparse`` spells it.

A quantity may also be per graph runner (``per_runner``: ``max_bs`` times the tokens per
request of the runner that allocates, ``tokens_per_request``), known only once the tracer
is told which runner's buffers it follows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import z3

from specbound.proofs import model

# The spec's quantities, by the name the audit reports them under: the same Z3 constants the
# spec's theorems quantify over.
QUANTITIES = {
    "max_bs": model.max_bs,            # requests a CUDA graph was captured for
    "bs": model.bs,                    # requests in the batch (the draft kernel's num_seqs)
    "seq_lens_sum": z3.Int("S"),       # sum of seq_len[b] over the batch (verified prefix, no draft tokens)
    "topk": model.K,
    "num_steps": model.D,              # speculative_num_steps, the tree depth
    "num_draft_tokens": model.n,       # tree size including the root
    "max_context_len": model.C,
    "page_size": model.page,
}

QUANTITY_TEXT = {
    "max_bs": "max_bs", "bs": "bs", "seq_lens_sum": "S", "topk": "K", "num_steps": "D",
    "num_draft_tokens": "n", "max_context_len": "C", "page_size": "page_size",
}


@dataclass(frozen=True)
class ExtraCondition:
    """A per-request condition an engine relies on without checking: ``seq_len[b] + h <= C``."""
    name: str
    headroom: Any        # Z3 term h
    text: str


@dataclass(frozen=True)
class Bindings:
    engine: str                               # its name, in verdicts ("<engine> does not check it")
    parameters: Mapping[str, str]             # parameter name -> quantity
    attributes: Mapping[str, str]             # `<x>.name` -> quantity
    expressions: Mapping[str, str]            # unparsed expression -> quantity
    allocators: frozenset                     # `torch.<name>(shape...)`
    like_allocators: frozenset                # `torch.<name>(tensor)`: the tensor's shape
    same_buffer: frozenset                    # `<buffer>.<name>(...)`: the same storage (or its shape)
    tokens_per_request: Mapping[str, str] = field(default_factory=dict)  # runner role -> quantity
    per_runner: Mapping[str, str] = field(default_factory=dict)   # name -> quantity times tokens per request
    derived_text: Mapping[str, str] = field(default_factory=dict)  # name -> how the docs explain it
    helper_enum: str | None = None            # the enum class the engine's executed helpers branch on
    extra_conditions: Mapping[str, tuple] = field(default_factory=dict)  # kind -> ExtraCondition, in order

    def __post_init__(self):
        for table in ("parameters", "attributes", "expressions"):
            unknown = {v for v in getattr(self, table).values() if v not in QUANTITIES and v not in self.per_runner}
            if unknown:
                raise ValueError(f"Bindings.{table}: {sorted(unknown)} is not a spec quantity "
                                 f"(one of {sorted(QUANTITIES)}) nor per_runner")
        bad = {q for q in (*self.per_runner.values(), *self.tokens_per_request.values()) if q not in QUANTITIES}
        if bad:
            raise ValueError(f"Bindings.per_runner/tokens_per_request: {sorted(bad)} is not a spec quantity")

    def quantity(self, name: str, role: str | None) -> z3.ArithRef | None:
        """The Z3 term of a bound quantity (a per-runner one needs the runner's ``role``)."""
        if name in self.per_runner:
            if role is None:
                return None
            return QUANTITIES[self.per_runner[name]] * QUANTITIES[self.tokens_per_request[role]]
        return QUANTITIES.get(name)

    def table_markdown(self) -> str:
        """The binding table as Markdown (the engine's audit doc)."""
        rows = [f"| {self.engine} spells it | as | spec quantity |", "|---|---|---|"]

        def q(name):
            return self.derived_text.get(name, QUANTITY_TEXT.get(name, name))
        for n, v in self.parameters.items():
            rows.append(f"| `{n}` | parameter | {q(v)} |")
        for n, v in self.attributes.items():
            rows.append(f"| `<x>.{n}` | attribute | {q(v)} |")
        for n, v in self.expressions.items():
            rows.append(f"| `{n}` | expression | {q(v)} |")
        return "\n".join(rows)
