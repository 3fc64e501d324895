"""A refuted NO-WRAP of an int32 row product (``(start_idx + pos) * vocab_size``): the
smallest counterexample for a real model's vocabulary, shown minimal through the trusted core
(the obligation is proved with one draft token fewer), a serving configuration that reaches
it, and the replay on vLLM's own kernel under the checked interpreter (:mod:`.replay`)."""

from __future__ import annotations

import dataclasses
import math
import time

import z3

from specbound.proofs.symexec.obligations import check

from . import contract, models, prove

# Real vocabularies (the target model's config.json vocab_size): the largest first, since it
# needs the fewest draft tokens.
VOCABS = (("google/gemma-2-9b-it", 256000), ("Qwen/Qwen3-8B", 151936), ("meta-llama/Llama-3.1-8B-Instruct", 128256))
MAX_SPEC_LEN = 128          # rejection_sampler.py: MAX_SPEC_LEN, asserted in RejectionSampler.forward
SERVING_K = 8               # a common num_speculative_tokens for the configuration shown


@dataclasses.dataclass
class Finding:
    kernel: str
    specialization: str
    obligation: str
    line: int
    status: str                       # "refuted" (replayed) | "survived" (not replayed) | "unreachable"
    model: str = ""
    vocab_size: int = 0
    min_num_tokens: int = 0           # fewest draft tokens in one verify step that wrap (0: not a token count)
    counts: list = dataclasses.field(default_factory=list)   # num_draft_tokens per request of the replay
    configuration: dict = dataclasses.field(default_factory=dict)
    verdict: str = ""
    detail: str = ""
    seconds: float = 0.0


def _holds(run, ob, extra: dict) -> str:
    """The obligation's verdict from the core with ``extra`` hypotheses added."""
    more = dataclasses.replace(ob, hyps={**ob.hyps, **extra})
    return check(more, run.functions, witness=False).status


def minimal_count(run, ob, vocab: int) -> tuple[str, int, str, str]:
    """The quantity (draft tokens, else requests) whose count makes ``ob`` (a wrap of
    ``index * vocab_size``) fail at this vocabulary, and the fewest that do: the candidate
    ``ceil(2^31 / vocab) + 1`` is refuted by the core and proved one fewer (both through
    :func:`obligations.check`).  ("", 0, ...) when neither count decides it."""
    q = run.q
    n = math.ceil(2 ** 31 / vocab) + 1
    for name in ("num_tokens", "batch"):
        at = lambda k: {"vocab_size_is": q["vocab_size"] == vocab, f"{name}_at_most": q[name] <= k}
        at_n, below = _holds(run, ob, at(n)), _holds(run, ob, at(n - 1))
        if at_n == "counterexample" and below == "proved":
            return name, n, at_n, below
    return "", 0, at_n, below


def layout(n_tokens: int, per_request: int) -> list:
    """num_draft_tokens per request: full requests, then the last token alone in a request of
    its own (position 0: no earlier draft of that request has to be accepted to reach it)."""
    before = n_tokens - 1
    counts = [per_request] * (before // per_request)
    if before % per_request:
        counts.append(before % per_request)
    return counts + [1]


def configuration(n_tokens: int, k: int = SERVING_K) -> dict:
    seqs = math.ceil(n_tokens / k)
    return {"num_speculative_tokens": k, "max_num_seqs": seqs, "max_num_batched_tokens": seqs * (k + 1),
            "note": f"{seqs} running requests each verifying {k} draft tokens in one step, the request owning "
                    f"draft token {n_tokens - 1} sampled with temperature > 0"}


def refute_row_products(root, kernel: contract.Kernel, replay_fn=None) -> list:
    """Per specialization, each refuted wrap obligation: the minimal counterexample and its
    replay (``replay_fn(kernel, spec, vocab, counts) -> Replay``, or None: not replayed)."""
    out = []
    for sp in kernel.specializations:
        run = models.run_kernel(root, kernel, sp)
        for ob in prove.obligations(run, "NO-WRAP"):
            start = time.perf_counter()
            if check(ob, run.functions, witness=False).status != "counterexample":
                continue
            name, vocab = VOCABS[0]
            what, n, at_n, below = minimal_count(run, ob, vocab)
            f = Finding(kernel.name, sp[0], ob.id, ob.line, "survived", name, vocab)
            if not what:
                # not an index * vocab_size product (the vocabulary loop's own increment): no real
                # vocabulary reaches it
                f.status, f.detail = "unreachable", (f"no draft-token or request count reaches it at vocab_size="
                                                     f"{vocab} (solver: {at_n}); needs vocab_size near 2^31; {ob.note}")
                f.seconds = time.perf_counter() - start
                out.append(f)
                continue
            f.min_num_tokens = n if what == "num_tokens" else 0
            f.detail = f"{ob.note}; fewest {what}: {n} ({n - 1}: proved by the core)"
            if what == "batch":
                # every request but the last without draft tokens: only the request index is large
                f.counts = [0] * (n - 1) + [1]
                f.configuration = {"max_num_seqs": n, "num_speculative_tokens": SERVING_K,
                                   "note": f"{n} running requests in one verify step, the last with a draft token "
                                           "(a request without draft tokens this step still has its row)"}
            else:
                f.counts = layout(n, MAX_SPEC_LEN)
                f.configuration = configuration(n)
            if replay_fn is not None:
                rep = replay_fn(kernel, sp, vocab, f.counts)
                f.verdict = rep.verdict
                f.detail += f"; replay: {rep.detail[:200]}"
                if rep.verdict == "wrap":
                    f.status = "refuted"
            f.seconds = time.perf_counter() - start
            out.append(f)
    return out


def refute_stored_index(root, kernel: contract.Kernel, replay_fn=None) -> list:
    """``eagle_prepare_inputs_padded_kernel``'s INDEX-IN-RANGE: the core shows which
    requests store an index outside ``[0, total_in)`` (request 0 with draft tokens whose
    next-token count is 0: a discarded request; every later request and every count >= 1
    proved), then ``replay_fn(kernel, spec) -> Replay`` runs vLLM's kernel on the smallest
    such batch."""
    out = []
    for sp in kernel.specializations:
        run = models.run_kernel(root, kernel, sp)
        r, cu, valid = run.result.pid[0], run.cx["cu_num_draft_tokens"], run.cx["valid_sampled_tokens_count"]
        drafts = cu(r) - z3.If(r == 0, 0, cu(r - 1))
        for ob in prove.obligations(run, "INDEX-IN-RANGE"):
            start = time.perf_counter()
            if check(ob, run.functions, witness=False).status != "counterexample":
                continue
            cases = {"request 0, drafts, count 0": _holds(run, ob, {"r0": r == 0, "d": drafts >= 1, "v0": valid(r) == 0}),
                     "count >= 1": _holds(run, ob, {"v1": valid(r) >= 1}),
                     "request >= 1": _holds(run, ob, {"r1": r >= 1})}
            f = Finding(kernel.name, sp[0], ob.id, ob.line, "survived")
            f.detail = (f"{ob.note}; the core: " + ", ".join(f"{k}: {v}" for k, v in cases.items()))
            f.configuration = {"note": "a request at batch index 0 that has draft tokens and is discarded this step "
                                       "(discard_request_mask: its scheduled tokens end before the request's tokens); "
                                       "the next-token kernel gives it valid_sampled_tokens_count 0"}
            if replay_fn is not None and list(cases.values()) == ["counterexample", "proved", "proved"]:
                rep = replay_fn(kernel, sp)
                f.verdict, f.detail = rep.verdict, f.detail + f"; replay: {rep.detail[:240]}"
                f.counts = [1]
                if rep.verdict == "output":
                    f.status = "refuted"
            f.seconds = time.perf_counter() - start
            out.append(f)
    return out
