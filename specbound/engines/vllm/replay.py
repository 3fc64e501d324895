"""vLLM's kernels launched from the release's source text (never imported) on a concrete
batch, under the checked interpreter, with the arguments its dispatchers pass.  Buffers
the contract sizes at ``num_tokens * vocab_size`` are allocated with ``torch.empty`` and
never written here: only the cells the kernel reads get pages."""

from __future__ import annotations

import pathlib

from specbound.replay.checked import checked_launch
from specbound.replay.outcome import Replay
from specbound.replay import load_kernel
from specbound.replay.subgrid import only_programs

from .models import kernel_params


def _inputs(counts, vocab, max_spec_len):
    import numpy as np
    import torch

    batch, n = len(counts), sum(counts)
    greedy = torch.ones(batch, dtype=torch.bool)
    greedy[-1] = False   # only the last request samples: every other program exits at once
    return {
        "output_token_ids": torch.full((batch, max_spec_len + 1), -1, dtype=torch.int32),
        "cu_num_draft_tokens": torch.tensor(np.cumsum(counts), dtype=torch.int32),
        "draft_token_ids": torch.zeros(n, dtype=torch.int32),
        "target_probs": torch.empty((n, vocab), dtype=torch.float32),
        "bonus_token_ids": torch.zeros((batch, 1), dtype=torch.int64),
        "recovered_token_ids": torch.zeros(n, dtype=torch.int32),
        "uniform_probs": torch.zeros(n, dtype=torch.float64),
        "is_greedy": greedy,
    }


def random_sample(root, kernel, spec, vocab: int, counts: list) -> Replay:
    """``rejection_random_sample_kernel`` as ``_rejection_random_sample`` launches it (grid
    ``(batch,)``, ``vocab_size = target_probs.shape[1]``), NO_DRAFT_PROBS as ngram / EAGLE
    verification runs it; the draft probabilities, when the specialization has them, are a
    second ``[num_tokens, vocab_size]`` buffer."""
    label, constexprs, _none = spec
    k = load_kernel(str(pathlib.Path(root) / kernel.file), kernel.name)
    max_spec_len = max(counts)
    t = _inputs(counts, vocab, max_spec_len)
    import torch

    no_draft = constexprs.get("NO_DRAFT_PROBS", constexprs.get("IS_NGRAM"))
    draft_probs = None if no_draft else torch.empty_like(t["target_probs"])
    shown = {"counts": f"{len(counts)} requests, num_draft_tokens {counts[0]} ... {counts[-1]}",
             "num_tokens": sum(counts), "vocab_size": vocab, "max_spec_len": max_spec_len, "spec": label}
    named = {f"{a}_ptr": v for a, v in t.items()}
    named.update(draft_probs_ptr=draft_probs, max_spec_len=max_spec_len, vocab_size=vocab,
                 synthetic_conditional_rates_ptr=None, SYNTHETIC_MODE=False)
    named.update(constexprs)

    def launch():
        k[(len(counts),)](**by_signature(root, kernel, named))

    fault = checked_launch(launch, shown, kernel=kernel.name)
    return fault or Replay("none", "ran clean", shown, kernel.name)


def by_signature(root, kernel, named: dict) -> dict:
    """The arguments the release's kernel takes, by name (an older signature lacks some:
    :mod:`.releases`)."""

    return {a.arg: named[a.arg] for a in kernel_params(str(pathlib.Path(root) / kernel.file), kernel.name)}


def recovered_tokens(root, kernel, spec, vocab: int, counts: list) -> Replay:
    """``sample_recovered_tokens_kernel`` as ``_sample_recovered_tokens`` launches it (grid
    ``(batch, max_spec_len)``, ``vocab_size = target_probs.shape[1]``, ``BLOCK_SIZE=8192``),
    restricted to the programs of the last request (every position, the early exits
    included): program ``(r, pos)`` reads only inputs and stores only its own token cell (the
    kernel's RACE-FREE theorem, proved), so it computes in this launch exactly what it
    computes in the full one, without the interpreter first running every earlier token's
    full-vocabulary loop.  A request with no draft tokens is legitimate (``cu`` repeats)."""
    import numpy as np
    import torch


    label, constexprs, _none = spec
    k = load_kernel(str(pathlib.Path(root) / kernel.file), kernel.name)
    batch, n, max_spec_len = len(counts), sum(counts), max(max(counts), 1)
    q_dtype = torch.float64 if constexprs.get("USE_FP64_GUMBEL") else torch.float32
    target = torch.empty((n, vocab), dtype=torch.float32)
    draft = None if constexprs.get("NO_DRAFT_PROBS", constexprs.get("IS_NGRAM")) else torch.empty_like(target)
    named = dict(zip(("output_token_ids_ptr", "cu_num_draft_tokens_ptr", "draft_token_ids_ptr", "draft_probs_ptr",
                      "target_probs_ptr", "inv_q_ptr"),
                     (torch.zeros(n, dtype=torch.int32), torch.tensor(np.cumsum(counts), dtype=torch.int32),
                      torch.zeros(n, dtype=torch.int32), draft, target, torch.empty((batch, vocab), dtype=q_dtype))))
    named.update({c: v for c, v in constexprs.items() if c.isupper()}, vocab_size=vocab, q_ptr=named["inv_q_ptr"])
    grid = (batch, max_spec_len)
    programs = [(batch - 1, p) for p in range(max_spec_len)]
    shown = {"counts": f"{batch} requests, num_draft_tokens {counts[0]} ... {counts[-1]}", "num_tokens": n,
             "vocab_size": vocab, "max_spec_len": max_spec_len, "spec": label,
             "launched": f"programs ({batch - 1}, 0..{max_spec_len - 1}) of the grid {grid}"}

    def launch():
        with only_programs(grid, programs) as small:
            k[small](**by_signature(root, kernel, named))

    fault = checked_launch(launch, shown, kernel=kernel.name)
    return fault or Replay("none", "ran clean", shown, kernel.name)


def prepare_inputs_padded(root, kernel, spec) -> Replay:
    """``eagle_prepare_inputs_padded_kernel`` as ``prepare_inputs_padded`` launches it (grid
    ``(num_reqs,)``) on the smallest batch the core names: one request with one draft token
    (``query_start_loc [0, 2]``), discarded (``valid_sampled_tokens_count 0``).  Its stored
    index is compared with the rows ``[0, 2)`` that ``last_hidden_states[token_indices_to_sample]``
    reads; torch reads index -1 as the last row."""
    import torch


    k = load_kernel(str(pathlib.Path(root) / kernel.file), kernel.name)
    out = torch.full((1,), 7, dtype=torch.int32)
    named = {"cu_num_draft_tokens_ptr": torch.tensor([1], dtype=torch.int32),
             "valid_sampled_tokens_count_ptr": torch.tensor([0], dtype=torch.int32),
             "query_start_loc_gpu_ptr": torch.tensor([0, 2], dtype=torch.int32),
             "token_indices_to_sample_ptr": out, "num_rejected_tokens_gpu_ptr": torch.zeros(1, dtype=torch.int32),
             "num_reqs": 1}
    shown = {"cu_num_draft_tokens": [1], "valid_sampled_tokens_count": [0], "query_start_loc": [0, 2],
             "spec": spec[0]}
    fault = checked_launch(lambda: k[(1,)](**by_signature(root, kernel, named)), shown, kernel=kernel.name)
    if fault is not None:
        return fault
    idx = int(out[0])
    if 0 <= idx < 2:
        return Replay("none", f"stored token_indices_to_sample[0] = {idx}, inside [0, 2)", shown, kernel.name)
    rows = torch.arange(2)
    return Replay("output", f"stored token_indices_to_sample[0] = {idx}, outside [0, 2); "
                  f"last_hidden_states[{idx}] reads row {int(rows[idx])} (the last) instead of failing", shown,
                  kernel.name)
