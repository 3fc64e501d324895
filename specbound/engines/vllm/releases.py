"""How the kernels of older vLLM releases differ from the contract table (read from vLLM
0.33.0's launch sites), one row per signature: which table parameters the release's kernel
lacks, which it names otherwise, and whether the table's model still applies.  A release
whose signature matches neither the table nor a row here is an ``error`` row naming the
difference (:func:`adapt`), never audited as if it were 0.33.0's.

The release ranges are those seen among the releases the matrix audited (the last patch of
each minor release, 0.8.3 and 0.8.4: ``docs/audit-vllm.md``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from . import contract

SYNTHETIC = ("synthetic_conditional_rates_ptr", "SYNTHETIC_MODE")

# vLLM < 0.17: the recovered-token kernel reads the whole vocabulary as one block of
# PADDED_VOCAB_SIZE = next_power_of_2(vocab_size) lanes, a constexpr that follows the model; audited
# at the block of the largest real vocabularies (Gemma-2 256,000, Qwen3 151,936)
PADDED_LANES = 2 ** 18
ONE_BLOCK = (f"one block of PADDED_VOCAB_SIZE = next_power_of_2(vocab_size) lanes divided by q (inv_q and BLOCK_SIZE "
             f"came in 0.17.0): audited at PADDED_VOCAB_SIZE = {PADDED_LANES}, vocabularies up to {PADDED_LANES}")
Q = contract.Buf("q_ptr", "[batch, vocab_size]", "batch * vocab_size", "float32",
                 f"{contract.REJ}:sample_recovered_tokens: q = torch.empty((batch_size, vocab_size)).exponential_()")
# only the upper half of next_power_of_2 is assumed (weaker, so still sound), which leaves the
# proofs small vocabularies for their closed witnesses
PADDED = contract.Fact("padded_vocab", "vocab_size <= PADDED_VOCAB_SIZE", "checked",
                       f"{contract.REJ}:sample_recovered_tokens: PADDED_VOCAB_SIZE=triton.next_power_of_2(vocab_size)")


def _padded(flag: str) -> tuple:
    return tuple((f"{'no_' if nd else ''}draft_probs", {"PADDED_VOCAB_SIZE": PADDED_LANES, flag: nd},
                  ("draft_probs_ptr",) if nd else ()) for nd in (False, True))


@dataclass(frozen=True)
class Variant:
    kernel: str
    releases: str
    absent: tuple = ()          # table parameters this signature lacks
    renamed: tuple = ()         # (the table's name, this signature's name)
    extra: tuple = ()           # parameters only this signature has
    modelled: bool = True       # False: named, not audited (the note says why)
    note: str = ""
    buffers: tuple = ()         # the buffers only this signature has
    specializations: tuple = () # this signature's own (else the table's, adapted)
    facts: tuple = ()           # what this signature's launch site adds
    properties: tuple = ()      # the properties the table's model covers here (else the table's)

    def difference(self) -> str:
        parts = [f"without {', '.join(self.absent)}"] if self.absent else []
        parts += [f"{new} for {old}" for old, new in self.renamed]
        parts += [f"with {', '.join(self.extra)}"] if self.extra else []
        return "; ".join(parts)


VARIANTS = (
    Variant("rejection_greedy_sample_kernel", "0.8.3 .. 0.19.1", ("uniform_probs_ptr",) + SYNTHETIC,
            note="no synthetic acceptance mode (added in 0.20.0): the is_greedy / all_greedy launches"),
    Variant("rejection_random_sample_kernel", "0.8.5 .. 0.19.1", SYNTHETIC,
            note="no synthetic acceptance mode (added in 0.20.0)"),
    Variant("rejection_random_sample_kernel", "0.8.3 .. 0.8.4", SYNTHETIC, (("NO_DRAFT_PROBS", "IS_NGRAM"),),
            note="IS_NGRAM = draft_probs is None (renamed NO_DRAFT_PROBS in 0.8.5); no synthetic mode"),
    Variant("sample_recovered_tokens_kernel", "0.17.0 .. 0.22.1", ("USE_FP64_GUMBEL",),
            note="inv_q always float32 (USE_FP64_GUMBEL added in 0.23.0): the float32 specializations"),
    Variant("sample_recovered_tokens_kernel", "0.8.5 .. 0.16.0", ("inv_q_ptr", "BLOCK_SIZE", "USE_FP64_GUMBEL"),
            extra=("q_ptr", "PADDED_VOCAB_SIZE"), buffers=(Q,), specializations=_padded("NO_DRAFT_PROBS"),
            facts=(PADDED,), note=ONE_BLOCK),
    Variant("sample_recovered_tokens_kernel", "0.8.3 .. 0.8.4", ("inv_q_ptr", "BLOCK_SIZE", "USE_FP64_GUMBEL"),
            (("NO_DRAFT_PROBS", "IS_NGRAM"),), ("q_ptr", "PADDED_VOCAB_SIZE"), buffers=(Q,),
            specializations=_padded("IS_NGRAM"), facts=(PADDED,), properties=("IN-BOUNDS", "NO-WRAP"),
            note=ONE_BLOCK + "; IS_NGRAM for NO_DRAFT_PROBS; RACE-FREE not audited: the IS_NGRAM path writes "
                 "target_probs in place (zeroes the draft token's probability, restores it), a region the table "
                 "(one token cell per program) does not describe"),
    Variant("eagle_prepare_inputs_padded_kernel", "0.12.0 .. 0.13.0", ("num_rejected_tokens_gpu_ptr",),
            note="no num_rejected_tokens output (added in 0.14.0)"),
)


class UnmodelledSignature(ValueError):
    """A release's signature the table names but does not model."""


def _expected(kernel: contract.Kernel, v: Variant) -> set:
    ren = dict(v.renamed)
    return {ren.get(p, p) for p in contract.table_params(kernel) if p not in v.absent} | set(v.extra)


def derive(kernel: contract.Kernel, v: Variant) -> contract.Kernel:
    """The table's kernel as this signature has it: absent buffers and scalars dropped, the
    specializations that turn an absent constexpr on dropped, renamed constexprs renamed."""
    ren = dict(v.renamed)
    specs = tuple((label, {ren.get(k, k): x for k, x in cx.items() if k not in v.absent},
                   tuple(a for a in none if a not in v.absent))
                  for label, cx, none in kernel.specializations if not any(cx.get(a) for a in v.absent))
    return dataclasses.replace(kernel, buffers=tuple(b for b in kernel.buffers if b.arg not in v.absent) + v.buffers,
                               scalars=tuple(s for s in kernel.scalars if s[0] not in v.absent),
                               specializations=v.specializations or specs, facts=kernel.facts + v.facts,
                               properties=v.properties or kernel.properties)


def adapt(kernel: contract.Kernel, source: str) -> tuple:
    """``(kernel, variant)``: the table's kernel when the source's signature is the table's
    (variant None), else the row of :data:`VARIANTS` it matches, derived.  Raises
    :class:`UnmodelledSignature` for a named signature the table does not model, and
    ValueError naming the difference for one it does not know."""
    params = set(contract.source_params(kernel, source))
    if params == contract.table_params(kernel):
        return kernel, None
    for v in VARIANTS:
        if v.kernel == kernel.name and params == _expected(kernel, v):
            if not v.modelled:
                raise UnmodelledSignature(f"{kernel.name}: the signature of vLLM {v.releases} ({v.difference()}) "
                                          f"is not modelled: {v.note}")
            return derive(kernel, v), v
    contract.check_signature(kernel, source)   # raises, naming the difference
    raise AssertionError("unreachable")
