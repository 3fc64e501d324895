"""Test support shared by the kernel tests, the benches and later fuzzers.

* pytest fixtures ``checked`` (a :class:`~specbound.kernels.checked.CheckedSession`
  recording footprints; skips when the kernels are compiled) and ``cuda_device`` (skips
  without CUDA).  Use them from any test file with
  ``from specbound.kernels.testing import checked, cuda_device  # noqa: F401`` or
  ``pytest_plugins = ["specbound.kernels.testing"]`` in a conftest.
* generators of valid (and deliberately malformed) draft trees and kv batches;
* guard-band buffers for compiled launches (sentinel regions before and after);
* :func:`adjacent_views`: tensors laid back to back in one allocation, so that an
  overrun of one provably lands in the next (what the checked interpreter must catch).
"""

from __future__ import annotations

import random
from typing import NamedTuple

import torch

from specbound import spec


# --- draft trees ------------------------------------------------------------------------

class TreeBatch(NamedTuple):
    parent_list: torch.Tensor     # (bs, K*(D-1)+1) or (bs, 0)
    selected_index: torch.Tensor  # (bs, n-1)
    seq_lens: torch.Tensor        # (bs,)


def random_tree(rng: random.Random, topk: int, depth: int, num_draft_tokens: int):
    """One valid EAGLE draft tree as (selected_index row, parent_list row).

    Depth-1 candidates are score indices [0, K); at each later depth K of the previous
    depth's candidates' children are "expanded" (their tokens fill the next K
    parent_list slots); the selection is an ancestor-closed random set of n - 1
    candidates, sorted ascending (so a parent's id is below its children's)."""
    k, d, n = topk, depth, num_draft_tokens
    width = spec.parent_list_width(k, d)
    pl = [-1] * width
    # candidates by depth: (score index); slot of a candidate x is x // K.
    candidates = list(range(k))
    for i in range(1, k + 1):
        if i < width:
            pl[i] = i - 1
    for level in range(2, d + 1):
        lo = k + k * k * (level - 2)
        block = list(range(lo, lo + k * k))
        candidates += block
        if level < d:
            chosen = sorted(rng.sample(block, k))
            for r, tok in enumerate(chosen):
                pl[1 + (level - 1) * k + r] = tok
    chosen_set: set[int] = set()
    want = n - 1

    def parent_ok(x):
        slot = spec.parent_slot(x, k)
        if slot == 0:
            return True
        tok = pl[slot] if 0 < slot < width else None
        return tok is not None and tok in chosen_set

    while len(chosen_set) < want:
        frontier = [x for x in candidates if x not in chosen_set and parent_ok(x)]
        if not frontier:  # cannot happen for n - 1 <= K + (D-1)K^2 with K slots expanded
            break
        chosen_set.add(rng.choice(frontier))
    return sorted(chosen_set), pl


def max_draft_tokens(topk: int, depth: int) -> int:
    """Largest n for which :func:`random_tree` always finds an ancestor-closed set: the
    depth-1 candidates plus the children of the K expanded nodes of each later level."""
    return 1 + spec.score_list_len(topk, depth)


def random_tree_batch(rng: random.Random, bs: int, topk: int, depth: int, num_draft_tokens: int,
                      max_seq_len: int = 64, malformed: float = 0.0) -> TreeBatch:
    """A batch of valid trees; with ``malformed`` > 0 each entry of selected_index and
    parent_list is replaced by a random (possibly invalid) value with that probability."""
    n = num_draft_tokens
    sels, pls = [], []
    width = spec.parent_list_width(topk, depth)
    score_len = spec.score_list_len(topk, depth)
    for _ in range(bs):
        sel, pl = random_tree(rng, topk, depth, n)
        if malformed:
            sel = [rng.randint(-2, score_len + 2 * topk) if rng.random() < malformed else x for x in sel]
            pl = [rng.choice([rng.randint(-2, score_len), *sel]) if rng.random() < malformed and sel else x
                  for x in pl]
        sels.append(sel)
        pls.append(pl)
    seq = [rng.randint(0, max_seq_len) for _ in range(bs)]
    return TreeBatch(
        torch.tensor(pls, dtype=torch.int64).reshape(bs, width),
        torch.tensor(sels, dtype=torch.int64).reshape(bs, n - 1),
        torch.tensor(seq, dtype=torch.int64))


# --- draft kv ---------------------------------------------------------------------------

class KvBatch(NamedTuple):
    req_pool_indices: torch.Tensor
    req_to_token: torch.Tensor
    seq_lens: torch.Tensor


def random_kv_batch(rng: random.Random, num_seqs: int, topk: int, num_steps: int, page_size: int = 1,
                    max_seq_len: int = 64, dtype=torch.int32, seq_lens=None) -> KvBatch:
    """A batch whose req_to_token rows are exactly as wide as the widest read
    (spec.kv_req_to_token_span) and hold distinct slot numbers, so any misplaced copy
    shows up."""
    seq = list(seq_lens) if seq_lens is not None else [rng.randint(0, max_seq_len) for _ in range(num_seqs)]
    span = max([spec.kv_req_to_token_span(s, topk, num_steps, page_size) for s in seq] or [1])
    pool = num_seqs + 2
    rows = rng.sample(range(pool), num_seqs)
    r2t = torch.arange(pool * span, dtype=dtype).reshape(pool, span) + 1000
    return KvBatch(torch.tensor(rows, dtype=torch.int64), r2t, torch.tensor(seq, dtype=torch.int64))


# --- guard bands --------------------------------------------------------------------------

# torch implements few ops for uint16/uint32 (none on CUDA for some): fill and compare
# such buffers through a signed view of the same width.
_SIGNED = {torch.uint16: torch.int16, torch.uint32: torch.int32}


def signed_view(t: torch.Tensor) -> torch.Tensor:
    return t.view(_SIGNED[t.dtype]) if t.dtype in _SIGNED else t


def guarded(numel: int, dtype: torch.dtype, *, device, pad: int = 4096, sentinel=None):
    """``(whole, inner)``: a 1-D buffer of ``pad`` sentinel cells, ``numel`` inner cells,
    ``pad`` sentinel cells; ``inner`` is the middle view (contiguous, the caller's output).
    Sentinels of uint16/uint32 buffers must fit the signed type of the same width."""
    if sentinel is None:
        sentinel = {torch.bool: True, torch.uint8: 0xA5, torch.uint16: 0x25A5,
                    torch.uint32: 0x25A5A5A5}.get(dtype, -7777)
    whole = torch.full((numel + 2 * pad,), sentinel, dtype=_SIGNED.get(dtype, dtype), device=device)
    whole = whole.view(dtype)
    return whole, whole[pad:pad + numel]


def adjacent_views(*parts: tuple[tuple[int, ...], torch.dtype, object], slack: int = 64) -> list[torch.Tensor]:
    """Contiguous tensors, one per ``(shape, dtype, fill)``, that are views of one byte
    buffer, each starting exactly where the previous one ends (checked: a layout that
    would need padding for alignment is refused), followed by ``slack`` zero bytes."""
    sizes = [torch.Size(shape).numel() * torch.empty(0, dtype=dtype).element_size() for shape, dtype, _ in parts]
    raw = torch.zeros(sum(sizes) + slack + 16, dtype=torch.uint8)
    start = (-raw.data_ptr()) % 16          # aligned for every dtype
    views = []
    for (shape, dtype, fill), size in zip(parts, sizes):
        itemsize = torch.empty(0, dtype=dtype).element_size()
        if (raw.data_ptr() + start) % itemsize:
            raise ValueError(f"adjacent_views: part {len(views)} ({dtype}) would start unaligned; "
                             "reorder the parts (widest items first)")
        view = raw[start:start + size].view(dtype).view(shape)
        view.fill_(fill)
        views.append(view)
        start += size
    return views


def changed_cells(before: torch.Tensor, after: torch.Tensor) -> set[int]:
    """Indices where two same-shaped buffers differ (footprint by diffing)."""
    diff = (signed_view(before).reshape(-1) != signed_view(after).reshape(-1)).nonzero().reshape(-1)
    return set(diff.cpu().tolist())


def all_equal_to(t: torch.Tensor, value) -> bool:
    """Every cell of ``t`` equals ``value`` (uint16/uint32 compared through a signed view)."""
    return bool((signed_view(t) == value).all())


# --- pytest fixtures --------------------------------------------------------------------------

try:
    import pytest
except ImportError:  # pragma: no cover - only the fixtures need pytest
    pytest = None

if pytest is not None:

    @pytest.fixture
    def checked():
        """A footprint-recording checked-interpreter session; skips when compiled."""
        from . import INTERPRETED, checked_interpreter
        if not INTERPRETED:
            pytest.skip("kernels are compiled (CUDA): the checked interpreter does not apply")
        with checked_interpreter(record_footprint=True) as session:
            yield session

    @pytest.fixture
    def cuda_device():
        """torch.device('cuda') with compiled kernels; skips otherwise."""
        from . import INTERPRETED
        if not torch.cuda.is_available():
            pytest.skip("needs CUDA")
        if INTERPRETED:
            pytest.skip("kernels were defined interpreted (TRITON_INTERPRET=1)")
        return torch.device("cuda")
