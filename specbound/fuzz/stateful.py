"""The CUDA-graph scenario as a Hypothesis state machine (sglang #33119/#33127, #27338).

A server captures its CUDA graphs at ``capture_bs`` requests (seed: 8) and preallocates
for that size a :class:`~specbound.reference.VerifyMask` and a draft ``kv_indices``
buffer of ``num_steps`` rows.  Then the running set grows and shrinks up to
``max_running`` requests (seed: 48), requests advance toward ``max_context_len`` (every
request keeps room for its ``num_steps`` draft tokens, as the scheduler guarantees),
and ``is_read`` is switched (which replaces the record: QLEN_ONLY when nothing reads the
mask).  After every step (and in an explicit ``run_batch`` rule) the current batch is verified the way a captured graph
replays it: **no host checks**, the raw kernels (``specbound.fuzz.launch``) launched
under the checked interpreter into

* the preallocated mask when ``fits(bs)`` holds, else a fresh per-batch allocation of
  ``spec.fallback_numel`` cells;
* the preallocated kv row when the batch is within the capture size, else a per-batch
  row of ``draft_kv_indices_buffer_width(bs, K, C)``.

Invariants: no out-of-bounds access; the mask, positions and retrive_* outputs equal
the spec's semantics; every buffer (stale cells of a reused one included) equals what
the reference writes into a copy of it; the preallocated buffer is reused exactly when
``fits`` holds.

:class:`CudaGraphMachine` uses the spec's formulas; :func:`machine_with` builds a
variant with a mutant's ``fits`` or kv row width (e.g. the pre-#33127 ``fits`` that let
FULL_MASK always fit): the checked interpreter then reports the overrun and Hypothesis
shrinks it to a short sequence of steps (see ``tests/test_fuzz_stateful.py``).
"""

from __future__ import annotations

import random

from specbound import kernels, spec  # noqa: F401  (first: sets TRITON_INTERPRET)

import torch  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule  # noqa: E402

from specbound import reference as ref  # noqa: E402
from specbound.kernels import checked_interpreter  # noqa: E402
from specbound.reference import samples  # noqa: E402
from specbound.spec import TreeMaskMode  # noqa: E402
from specbound.proofs import registry

from . import launch  # noqa: E402
from .expected import PropertyFailure, expected_tree  # noqa: E402
from .strategies import TreeCase, tree_shapes  # noqa: E402

CAPTURE_BS = 8
MAX_RUNNING = 48


def spec_fits(bs: int, max_bs: int, mode: TreeMaskMode) -> bool:
    return spec.fits(bs, max_bs)


class CudaGraphMachine(RuleBasedStateMachine):
    """Capture at :data:`CAPTURE_BS`, run up to :data:`MAX_RUNNING` requests (see module doc)."""

    capture_bs = CAPTURE_BS
    max_running = MAX_RUNNING
    max_context = 64
    # The caller's sizing decisions; machine_with() swaps in a mutant's.
    fits_fn = staticmethod(spec_fits)
    kv_width_fn = staticmethod(spec.draft_kv_indices_buffer_width)
    uses_spec_fits = True
    # light: only launch the tree kernel checked (no output comparisons, no kv launch); makes
    # each shrink attempt of an overrun hunt a few times cheaper
    light = False
    last_trace: list = []         # the steps of the most recent run (the shrunk one after a failure)

    def __init__(self):
        super().__init__()
        self.trace: list = []
        type(self).last_trace = self.trace
        self.requests: list[list[int]] = []   # [seq_len, tree seed]
        self.next_seed = 0
        self.batches_run = 0
        self.reuses = 0

    # --- set-up ----------------------------------------------------------------------------
    @initialize(shape=tree_shapes(max_topk=4, max_depth=5, max_tokens=16),
                mode=st.sampled_from(tuple(TreeMaskMode)), is_read=st.booleans(), data=st.data())
    def capture(self, shape, mode, is_read, data):
        self.topk, self.depth, self.n = shape
        if mode is TreeMaskMode.QLEN_ONLY_BITPACKING and self.n > spec.BITPACK_MAX_DRAFT_TOKENS:
            mode = TreeMaskMode.FULL_MASK
        self.num_steps = self.depth
        self.c = data.draw(st.integers(self.num_steps + 1, self.max_context), label="max_context_len")
        self.read_mode = mode
        self._make_mask(is_read)
        width = self.kv_width_fn(self.capture_bs, self.topk, self.c)
        self.kv_buffer = torch.full((self.num_steps, width), -1, dtype=torch.int64)
        self.kv_indptr = torch.full((self.num_steps, spec.kv_indptr_row_len(self.capture_bs, self.topk)), -1,
                                    dtype=torch.int64)
        span = max(spec.kv_req_to_token_span(s, self.topk, self.num_steps, 1) for s in range(self.c - self.num_steps + 1))
        self.r2t = samples.req_to_token(self.max_running, span)
        self.trace.append(("capture", dict(topk=self.topk, depth=self.depth, n=self.n, mode=mode.name,
                                           is_read=is_read, C=self.c, capture_bs=self.capture_bs)))

    def _make_mask(self, is_read: bool) -> None:
        self.vm = ref.maybe_create_verify_mask(
            is_draft_runner=False, skip_prefill=False, max_bs=self.capture_bs, num_draft_tokens=self.n,
            max_context_len=self.c, is_read=is_read, read_mode=self.read_mode)
        # a reused buffer holds whatever the last batch left; start from junk, not zeros (seeded
        # junk: a run is reproducible from its steps)
        if self.vm.buffer.dtype == torch.bool:
            junk = torch.Generator().manual_seed(len(self.trace))
            self.vm.buffer.copy_(torch.rand(self.vm.buffer.shape, generator=junk) < 0.5)

    # --- rules ------------------------------------------------------------------------------
    @property
    def room(self) -> int:
        """Longest prefix that still has room for the draft tokens."""
        return self.c - self.num_steps

    @rule(count=st.integers(1, MAX_RUNNING), seq_len=st.integers(0, 64))
    def admit(self, count, seq_len):
        """``count`` new requests with a ``seq_len``-token prefix (capped at the room)."""
        count = min(count, self.max_running - len(self.requests))
        s = min(seq_len, self.room)
        for _ in range(count):
            self.requests.append([s, self.next_seed])
            self.next_seed += 1
        self.trace.append(("admit", count, s))
        self.run_batch()

    @precondition(lambda self: self.requests)
    @rule(count=st.integers(1, MAX_RUNNING))
    def retire(self, count):
        count = min(count, len(self.requests))
        del self.requests[-count:]
        self.trace.append(("retire", count))
        self.run_batch()

    @precondition(lambda self: self.requests)
    @rule(accepted=st.integers(0, 8), to_limit=st.booleans())
    def decode(self, accepted, to_limit):
        """Every request commits ``accepted`` tokens (or jumps to the limit), capped at the room."""
        for r in self.requests:
            r[0] = self.room if to_limit else min(r[0] + accepted, self.room)
        self.trace.append(("decode", "to_limit" if to_limit else accepted))
        self.run_batch()

    @rule()
    def switch_is_read(self):
        self._make_mask(not self.vm.is_read)
        self.trace.append(("switch_is_read", self.vm.is_read))
        self.run_batch()

    # --- the check -------------------------------------------------------------------------------
    def _trees(self):
        sels, pls = [], []
        for _, seed in self.requests:
            sel, pl = samples.random_draft_tree(random.Random(seed), self.topk, self.depth, self.n)
            sels.append(sel)
            pls.append(pl)
        return sels, pls

    @invariant()
    def running_set_is_consistent(self):
        assert len(self.requests) <= self.max_running
        assert all(0 <= r[0] <= self.room for r in self.requests)

    @rule()
    def run_batch(self):
        """Verify the running batch as a captured graph would run it (the module doc's invariants)."""
        bs = len(self.requests)
        lens = [s for s, _ in self.requests]
        total = sum(lens)
        vm = self.vm
        mode, n = vm.mode, self.n
        sels, pls = self._trees()
        case = TreeCase(topk=self.topk, depth=self.depth, num_draft_tokens=n, mode=int(mode),
                        max_context_len=self.c, seq_lens=lens, selected_index=sels, parent_list=pls)
        pl, sel, seq = case.tensors()

        reuse = bool(self.fits_fn(bs, vm.max_bs, mode))
        if self.uses_spec_fits and reuse != vm.fits(bs):
            raise PropertyFailure(f"reuse decision {reuse} != VerifyMask.fits({bs}) = {vm.fits(bs)}")
        buf = vm.buffer if reuse else torch.zeros(spec.fallback_numel(mode, bs, n, total), dtype=vm.buffer.dtype)
        if self.uses_spec_fits:
            chosen = vm.buffer_for_batch(bs, total)
            if (chosen.data_ptr() == vm.buffer.data_ptr()) != reuse:
                raise PropertyFailure("VerifyMask.buffer_for_batch disagrees with fits about reuse")
        self.reuses += reuse
        before = buf.clone()
        kw = dict(topk=self.topk, depth=self.depth, num_draft_tokens=n, mode=mode)
        with checked_interpreter():
            out = launch.launch_tree_raw(pl, sel, seq, buf, **kw)
        if self.light:
            self.batches_run += 1
            return
        # the whole buffer, stale cells included, is what the reference writes into a copy
        want = ref.build_tree(pl, sel, seq, tree_mask=before, **kw)
        if not torch.equal(buf, want.tree_mask):
            raise PropertyFailure(f"mask buffer differs from the reference's (bs={bs}, reuse={reuse})")
        # and the batch's extent is the spec's semantics
        spec_out = expected_tree(case)
        extent = spec.mask_batch_numel(mode, bs, n, total)
        if not torch.equal(buf[:extent], spec_out["tree_mask"]):
            raise PropertyFailure(f"mask extent differs from the spec (bs={bs}, mode={mode.name})")
        for name in ("positions", "retrive_index", "retrive_next_token", "retrive_next_sibling"):
            if not torch.equal(out[name], spec_out[name]):
                raise PropertyFailure(f"{name} differs from the spec (bs={bs})")

        # draft kv_indices: the captured row within the capture size, else a per-batch row
        k, steps = self.topk, self.num_steps
        if bs <= self.capture_bs:
            ind, ptr = self.kv_buffer, self.kv_indptr
        else:
            ind = torch.full((steps, self.kv_width_fn(bs, k, self.c)), -1, dtype=torch.int64)
            ptr = torch.full((steps, spec.kv_indptr_row_len(bs, k)), -1, dtype=torch.int64)
        pool = torch.arange(bs, dtype=torch.int64)
        before_ind, before_ptr = ind.clone(), ptr.clone()
        with checked_interpreter():
            launch.launch_kv_raw(pool, self.r2t, seq, ind, ptr, topk=k, num_steps=steps)
        w_ind, w_ptr = ref.draft_decode_kv_indices(pool, self.r2t, seq, topk=k, num_steps=steps,
                                                   kv_indices=before_ind, kv_indptr=before_ptr)
        if not (torch.equal(ind, w_ind) and torch.equal(ptr, w_ptr)):
            raise PropertyFailure(f"kv_indices / kv_indptr differ from the reference (bs={bs})")
        self.batches_run += 1
        self.trace.append(("verified", dict(bs=bs, reuse=reuse, seq_lens_sum=total)))


def pre_33127_fits(mutant_fits):
    """sglang before #33127: FULL_MASK always fits (the mutant's ``fits``), QLEN_ONLY checked."""
    def fits(bs, max_bs, mode):
        return mutant_fits(bs, max_bs) if mode is TreeMaskMode.FULL_MASK else spec.fits(bs, max_bs)
    return fits


def machine_with(*, fits=None, kv_width=None, name="MutantCudaGraphMachine", **attrs):
    """A :class:`CudaGraphMachine` whose caller uses the given ``fits(bs, max_bs, mode)``
    and/or ``kv_width(num_seqs, K, C)`` instead of the spec's."""
    body = dict(attrs)
    if fits is not None:
        body["fits_fn"] = staticmethod(fits)
        body["uses_spec_fits"] = False
    if kv_width is not None:
        body["kv_width_fn"] = staticmethod(kv_width)
    return type(name, (CudaGraphMachine,), body)


def mutant_override(theorem_id: str, mutant_id: str, name: str):
    """``Mutant.overrides[name]`` of a theorem's mutant, from the proof registry."""
    for th in registry.theorems():
        if th.id == theorem_id:
            for m in th.mutants:
                if m.id == mutant_id:
                    return m.overrides[name]
    raise KeyError(f"{theorem_id}/{mutant_id} has no override {name!r}")


TestCudaGraph = CudaGraphMachine.TestCase
