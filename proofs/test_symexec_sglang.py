"""sglang's own Triton kernels under the symbolic executor, read from the installed
sglang by path: the executor's model of them equals the checked interpreter on random
launches; the default specializations are proved; the preconditions sglang leaves unchecked
are refuted by replays; planted off-by-ones in copies of the source are refuted by replays."""

from __future__ import annotations

import random
import shutil

import pytest

from specbound import manifest, spec
from specbound.proofs.symexec import selfcheck
from specbound.engines.sglang import draft_kv_model as sglang_draft_kv
from specbound.engines.sglang import draft_kv_obligations as sglang_draft_kv_obligations
from specbound.engines.sglang import tree_model as sglang_tree
from specbound.engines.sglang.testing import planted_copy
from specbound.proofs.symexec import engine_theorems as sglang_common
from specbound.proofs.symexec.values import Unsupported
from specbound.replay import load_kernel

pytest.importorskip("specbound.kernels")  # before triton: it sets TRITON_INTERPRET
torch = pytest.importorskip("torch")


def _source(root, module):
    path = root / module.SOURCE
    if not path.is_file():
        pytest.skip(f"this sglang keeps {module.KERNEL} elsewhere")
    return str(path)


@pytest.fixture(scope="module")
def kv_path(sglang_root):
    return _source(sglang_root, sglang_draft_kv)


@pytest.fixture(scope="module")
def tree_path(sglang_root):
    return _source(sglang_root, sglang_tree)


def _interpreted(fn):
    from specbound.kernels import INTERPRETED, checked_interpreter
    if not INTERPRETED:
        pytest.skip("kernels are compiled: the checked interpreter does not apply")
    with checked_interpreter():
        fn()


# --- the model equals the interpreter --------------------------------------------------------------

KV_SPECS = [sglang_draft_kv.KvSpec(0, False, 4, 4, 16), sglang_draft_kv.KvSpec(0, True, 4, 4, 16),
            sglang_draft_kv.KvSpec(2, True, 4, 2, 16)]


@pytest.mark.parametrize("sp,seed", [(sp, s) for sp in KV_SPECS for s in range(2)], ids=str)
def test_kv_model_matches_the_interpreter(kv_path, sp, seed):
    from specbound.reference import samples

    rng = random.Random(seed)
    ns = rng.randint(1, 2 if sp.NUM_STEPS else 4)
    k = rng.randint(1, max(1, min(2 if sp.NUM_STEPS else 4, sp.num_tokens_upper // ns)))
    d = sp.NUM_STEPS or rng.randint(1, sp.iter_upper)
    page = rng.choice([2, 3, 4]) if sp.paged else 1
    seq = [rng.randint(0, 530 if sp.NUM_STEPS else 40) for _ in range(ns)]   # past one 512-slot tile
    c = max(seq) + d + rng.randint(0, 3)
    alloc = ns + rng.randint(0, 1)
    width, stride = alloc * k * c, ns * k + 1 + rng.randint(0, 2)
    span = max(spec.kv_req_to_token_span(s, k, d, page) for s in seq)
    pool = ns + 1
    rows = rng.sample(range(pool), ns)
    blocks = rng.randint(1, 2) if sp.NUM_STEPS else 1
    g0 = d * blocks
    r2t = samples.req_to_token(pool, span, torch.int32)
    kv_i, kv_p = torch.zeros((d, width), dtype=torch.int32), torch.zeros((d, stride), dtype=torch.int32)
    seq_t = torch.tensor(seq, dtype=torch.int64)
    kernel = load_kernel(kv_path, sglang_draft_kv.KERNEL)
    _interpreted(lambda: kernel[(g0, ns, k)](torch.tensor(rows), r2t, seq_t, kv_i, kv_p, seq_t.repeat_interleave(k),
                                             span, width, stride, sp.bs_upper, sp.iter_upper, sp.num_tokens_upper,
                                             page, NUM_STEPS=sp.NUM_STEPS))
    run = sglang_draft_kv.run_kernel(sp, kv_path)
    scalars = {"num_seqs": ns, "K": k, "D": d, "page_size": page, "C": c, "width": width, "alloc_bs": alloc,
               "indptr_stride": stride, "row_stride": span, "pool_rows": pool, "grid0": g0, "token_blocks": blocks}
    positions_prefix = [sum(seq[z // k] for z in range(j)) for j in range(ns * k + 1)]
    tables = {"seq_len": seq, "P": spec.prefix_sums(seq), "Q": positions_prefix, "pool_row": rows,
              "req_to_token": r2t.reshape(-1).tolist()}
    writes = selfcheck.concrete_writes(run, scalars, tables, (g0, ns, k))
    mem = selfcheck.final_memory(writes, {"kv_indices": [0] * (d * width), "kv_indptr": [0] * (d * stride)})
    assert mem["kv_indices"] == kv_i.reshape(-1).tolist()
    assert mem["kv_indptr"] == kv_p.reshape(-1).tolist()


TREE_SPECS = [sglang_tree.TreeSpec(2, 2, 4, 1, 2), sglang_tree.TreeSpec(2, 3, 6, 0, 3), sglang_tree.TreeSpec(2, 3, 6, 0),
              sglang_tree.TreeSpec(2, 2, 4, 1)]


@pytest.mark.parametrize("sp,malformed", [(sp, m) for sp in TREE_SPECS for m in (0.0, 0.3)], ids=str)
def test_tree_model_matches_the_interpreter(tree_path, sp, malformed):
    """Scalar code with data-dependent ifs and read-modify-write of retrive_next_token: the
    final contents of every output equal the interpreter's, on valid and malformed trees."""
    from specbound.reference.samples import random_tree_batch

    from specbound.kernels import OutOfBoundsAccess

    rng = random.Random(11)
    batch = sp.bs or 3   # the symbolic-batch model, evaluated at a batch of 3
    kernel = load_kernel(tree_path, sglang_tree.KERNEL)
    for _ in range(20):   # a malformed batch may read outside parent_list: draw one that does not
        tb = random_tree_batch(rng, batch, sp.topk, sp.depth, sp.n, max_seq_len=20, malformed=malformed)
        seq = tb.seq_lens.tolist()
        numel = spec.mask_batch_numel(spec.TreeMaskMode(sp.mode), batch, sp.n, sum(seq))
        outs = [torch.ones(numel, dtype=torch.bool), torch.zeros(batch * sp.n, dtype=torch.int64)] + \
            [torch.full((batch, sp.n), -1, dtype=torch.int64) for _ in range(3)]
        try:
            _interpreted(lambda: kernel[(batch,)](tb.parent_list, tb.selected_index, tb.seq_lens,
                                                  torch.cumsum(tb.seq_lens, 0) - tb.seq_lens, *outs, topk=sp.topk,
                                                  depth=sp.depth, draft_token_num=sp.n, tree_mask_mode=sp.mode,
                                                  batch_size=batch, parent_list_stride=sp.pl_width,
                                                  selected_index_stride=sp.sel_width))
            break
        except OutOfBoundsAccess:
            assert malformed, "a well-formed tree left its buffers"
    else:
        pytest.fail("no in-bounds batch drawn")
    run = sglang_tree.run_kernel(sp, tree_path, sglang_tree.Host(drop=("well_formed_tree",)))
    cells = batch * sp.n
    tables = {"seq_len": seq, "P": spec.prefix_sums(seq), "selected_index": tb.selected_index.reshape(-1).tolist(),
              "parent_list": tb.parent_list.reshape(-1).tolist(), "retrive_next_token_initial": [-1] * cells}
    writes = selfcheck.concrete_writes(run, {"bs": batch, "C": 64}, tables, (batch,))
    initial = {"tree_mask": [1] * numel, "positions": [0] * cells}
    initial.update({n: [-1] * cells for n in ("retrive_index", "retrive_next_token", "retrive_next_sibling")})
    mem = selfcheck.final_memory(writes, initial)
    got = [outs[0].to(torch.int64).tolist()] + [o.reshape(-1).tolist() for o in outs[1:]]
    for name, values in zip(("tree_mask", "positions", "retrive_index", "retrive_next_token", "retrive_next_sibling"),
                            got):
        assert mem[name] == values, name


# --- proofs and refutations ------------------------------------------------------------------------

def test_kv_default_specialization_is_proved(kv_path):
    """The default: NUM_STEPS 0, page 1, every lane bound symbolic (one proof for each of the
    9 x 4 x 12 power-of-two combinations), each range a stated precondition; every obligation
    is witnessed (the preconditions hold together), at lane bounds the witness names."""
    sp = sglang_draft_kv.KvSpec(0, False)
    assert sp.label == "NUM_STEPS=0,page=1,bs_upper=2^0..2^8,iter_upper=2^0..2^3,num_tokens_upper=2^0..2^11,seq_lens=int64"
    results = sglang_draft_kv.prove(sp, kv_path)
    assert {r.id.split("[")[0] for r in results} == {f"KERNEL-SGLANG-DRAFT-KV-{p}" for p in sglang_draft_kv.PROPERTIES}
    assert all(r.ok for r in results), [(r.id, r.detail) for r in results if not r.ok]
    assert manifest.compare_results(results) == []   # the ids and verdicts proofs/manifest.json records
    for r in results:
        assert {"bs_upper in {1,2,4,...,256}", "iter_upper in {1,2,4,...,8}",
                "num_tokens_upper in {1,2,4,...,2048}"} <= set(r.preconditions)
        assert r.witness["witnessed"] == r.witness["obligations"] > 0
    # what the proofs rest on is read from them: draft room (a declared precondition sglang
    # does not check) and the launch contracts (core axioms) under which the stores stay in bounds
    in_bounds = next(r for r in results if "-IN-BOUNDS[" in r.id)
    assert "draft_room" in in_bounds.preconditions and "draft_room" in in_bounds.hypotheses_used
    assert {"width_from_sizing", "grid0_is_num_steps", "prefix_step"} <= set(in_bounds.axioms_used)
    # the prefix copy's loop-carried offset is modelled by a closed form the core proved
    # inductive: every theorem of the run cites that proof
    loops = [p.name for p in sglang_draft_kv.run_kernel(sglang_draft_kv.KvSpec(0, False, 8, 4, 32), kv_path)
             .result.invariant_proofs]
    assert loops and all(n.startswith("loop-invariant@") for n in loops), loops
    assert all(set(loops) <= set(r.lemmas_cited) for r in results)


@pytest.mark.parametrize("bound", ["bs_upper", "num_tokens_upper"])
def test_kv_symbolic_lane_bound_must_cover_its_items(kv_path, bound):
    """The symbolic lane bounds are not idle: without ``num_seqs <= bs_upper`` (or
    ``num_seqs*topk <= num_tokens_upper``) some value of the range cuts a prefix sum short
    and NO-TRUNCATION fails."""
    sp = sglang_draft_kv.KvSpec(0, False)
    run = sglang_draft_kv.run_kernel(sp, kv_path, sglang_draft_kv.Host(drop=(f"lane_bound_{bound}",)))
    (res,) = sglang_common.prove(run, sglang_draft_kv_obligations.obligations, ("NO-TRUNCATION",))
    assert not res.ok, res.detail


def test_kv_per_request_conditions_are_quantified_hypotheses(kv_path):
    """Per-request and per-entry preconditions are single quantified hypotheses of the run
    (the core instantiates them at each index read); the launch contracts are core axioms."""
    import z3

    run = sglang_draft_kv.run_kernel(sglang_draft_kv.KvSpec(0, False, 8, 4, 32), kv_path)
    for name in ("seq_len_nonneg", "seq_len_le_context", "draft_room", "pool_row_in_req_to_token",
                 "req_to_token_row_covers_reads", "req_to_token_int32"):
        assert z3.is_quantifier(run.hyps[name]) and run.hyps[name].is_forall(), name
    assert not any("@" in label for label in run.hyps)
    assert {ax.name for ax in run.axioms} >= {"width_from_sizing", "grid0_is_num_steps", "indptr_row_width",
                                              "req_to_token_pool", "batch_nonempty"}


def test_kv_token_blocks_paged_is_proved(kv_path):
    results = sglang_draft_kv.prove(sglang_draft_kv.KvSpec(3, True, 4, 4, 16), kv_path)
    assert all(r.ok for r in results), [(r.id, r.detail) for r in results if not r.ok]


def test_kv_without_draft_room_writes_past_the_buffer(kv_path):
    ref = sglang_draft_kv.refute_without(sglang_draft_kv.KvSpec(0, False, 8, 4, 32), kv_path, "draft_room")
    assert ref.status == "refuted" and ref.verdict == "oob", ref.detail
    cex = ref.counterexample
    assert "out-of-bounds store" in ref.detail
    assert max(cex["replay.seq_lens"]) + cex["num_steps"] > cex["C"]   # a request without room


@pytest.mark.parametrize("stride", ["kv_indices_stride", "kv_indptr_stride"])
def test_kv_row_offset_wraps_in_int32(kv_path, stride):
    """(num_steps - 1) * stride >= 2^31 with a row below 2^31 (all sglang asserts): the row
    offset ``stride * step`` is an int32 product; replayed on sglang's kernel with the smallest
    such buffers (3 rows of 2^30 cells, allocated untouched), Triton's overflow check fires."""
    ref = sglang_draft_kv.refute_without(sglang_draft_kv.KvSpec(0, False, 8, 4, 32), kv_path,
                                         f"row_offsets_int32_{stride}")
    if ref.status != "refuted" and "cannot allocate" in ref.detail:
        pytest.skip(f"this machine refuses the replay buffers: {ref.detail}")
    assert ref.status == "refuted" and ref.verdict == "wrap", ref.detail
    cex = ref.counterexample
    row = cex["width"] if stride == "kv_indices_stride" else cex["indptr_stride"]
    assert (cex["num_steps"] - 1) * row >= 2**31 > row
    assert "int32 overflow" in ref.detail


def test_tree_default_specialization_is_proved(tree_path):
    """The audit's default: K=2, D=2, n=4, QLEN_ONLY, for every batch size of the envelope at once."""
    results = sglang_tree.prove(sglang_tree.TreeSpec(2, 2, 4, 1), tree_path)
    assert all(r.ok for r in results), [(r.id, r.detail) for r in results if not r.ok]
    assert manifest.compare_results(results) == []
    assert all(f"batch_size=1..{sglang_tree.BATCH_MAX}]" in r.id for r in results)
    in_bounds = next(r for r in results if "-IN-BOUNDS[" in r.id)
    assert "well_formed_tree" in in_bounds.hypotheses_used   # the unguarded parent_list read rests on it


def test_tree_symbolic_batch_size_rests_on_its_bound(tree_path, monkeypatch):
    """The symbolic-batch proof is not vacuous in batch_size: the int32 request offsets
    (``n * n * batch_idx``) wrap once the stated bound is lifted far enough, and NO-WRAP fails."""
    monkeypatch.setattr(sglang_tree, "BATCH_MAX", 2**40)
    results = {r.id.split("[")[0]: r for r in sglang_tree.prove(sglang_tree.TreeSpec(2, 2, 4, 1), tree_path)}
    assert not results["KERNEL-SGLANG-TREE-QLEN-NO-WRAP"].ok
    assert results["KERNEL-SGLANG-TREE-QLEN-IN-BOUNDS"].ok


# batch_size planted where one symbolic run cannot stand for every value: a trip count (direct,
# or through arithmetic) and a block shape of arithmetic on it (arange(0, batch_size) itself is
# a lane of 0 <= lane < batch_size, modelled).  A concrete batch size still runs the trip counts.
BATCH_SIZE_PLANTS = {
    "trip count": "    for _extra in range(batch_size):\n        _seen = tl.load(verified_seq_len_ptr + batch_idx)\n",
    "derived trip count": "    for _extra in range(batch_size - batch_idx - 1):\n"
                          "        _seen = tl.load(verified_seq_len_ptr + batch_idx)\n",
    "shape": "    _lanes = tl.arange(0, batch_size * 2)\n",
}


@pytest.mark.parametrize("where", sorted(BATCH_SIZE_PLANTS))
def test_symbolic_batch_size_refused_in_a_shape_or_trip_count(tree_path, tmp_path, where):
    anchor = "    seq_len = tl.load(verified_seq_len_ptr + batch_idx)\n"
    copy = _planted(tmp_path, tree_path, anchor, anchor + BATCH_SIZE_PLANTS[where])
    with pytest.raises(Unsupported, match="batch_size|non-constexpr"):
        sglang_tree.run_kernel(sglang_tree.TreeSpec(2, 2, 4, 1), copy)
    if where != "shape":   # one compiled kernel per batch size: a concrete one is still modelled
        sglang_tree.run_kernel(sglang_tree.TreeSpec(2, 2, 4, 1, 2), copy)


def test_tree_on_malformed_trees_reads_outside_parent_list(tree_path):
    ref = sglang_tree.refute_malformed(sglang_tree.TreeSpec(2, 2, 4, 1), tree_path)   # the audit's default
    assert ref.status == "refuted" and ref.verdict == "oob" and "parent_list" in ref.detail
    assert 1 <= ref.counterexample["bs"] == len(ref.counterexample["replay.seq_lens"]) <= 4   # replayed at its own batch


def _planted(tmp_path, path, old, new):
    return planted_copy(path, old, new, tmp_path / "planted.py")


def test_planted_off_by_one_in_sglang_kv_kernel_is_refuted(kv_path, tmp_path):
    """A copy of sglang's kernel whose extension store lands one slot late: refuted, and the
    replay on that copy faults (out of bounds, or a cell another program owns)."""
    sp = sglang_draft_kv.KvSpec(0, False, 8, 4, 32)
    copy = _planted(tmp_path, kv_path, "kv_ptr + seq_len_w + extend_offset,", "kv_ptr + seq_len_w + extend_offset + 1,")
    ref = sglang_draft_kv.refute_without(sp, copy)
    assert ref.status == "refuted" and ref.verdict in ("oob", "race"), ref.detail
    assert sglang_draft_kv.refute_without(sp, kv_path).status == "survived"   # the real kernel: nothing to refute


def test_planted_search_past_the_row_in_sglang_tree_kernel_is_refuted(tree_path, tmp_path):
    """The CUDA kernel's historical bug planted in a copy of the Triton port: the parent search
    scans n entries of the (n - 1)-entry selected_index row."""
    sp = sglang_tree.TreeSpec(2, 2, 4, 1, 2)
    copy = _planted(tmp_path, tree_path, "for pp in range(draft_token_num - 1):", "for pp in range(draft_token_num):")
    ref = sglang_tree.refute_run(sp, copy)
    assert ref.status == "refuted" and ref.verdict == "oob" and "selected_index" in ref.detail, ref.detail


def test_unsupported_construct_in_a_future_kernel_is_named(kv_path, tmp_path):
    anchor = "    seq_lens = tl.load(paged_kernel_lens + load_offset, mask=load_offset < bid, other=0)\n"
    copy = _planted(tmp_path, kv_path, anchor, anchor + "    while bid > 0:\n        bid -= 1\n")
    with pytest.raises(Unsupported, match="While"):
        sglang_draft_kv.run_kernel(sglang_draft_kv.KvSpec(0, False, 8, 4, 32), copy)


def test_older_release_without_token_blocks(kv_path, tmp_path):
    """A token-block specialization on a kernel without ``NUM_STEPS`` is refused, by name."""

    src = tmp_path / "old.py"
    shutil.copy(kv_path, src)
    text = src.read_text().replace("NUM_STEPS: tl.constexpr = 0,", "")
    src.write_text(text)
    with pytest.raises(Unsupported, match="no token-block launch"):
        sglang_draft_kv.run_kernel(sglang_draft_kv.KvSpec(2, False, 4, 2, 16), str(src))


@pytest.mark.parametrize("paths", [{"window_size": 6, "sink_size": 2}, {"ENTRY_PAGE_SIZE": 2},
                                   {"TRANSLATE": True}, {"window_size": 5, "ENTRY_PAGE_SIZE": 4, "TRANSLATE": True}],
                         ids=str)
def test_kv_read_plan_paths_match_the_interpreter(kv_path, paths):
    """The paths the optional arguments switch on (draft window, page-granular read table,
    v2p translation) run in the executor as in the interpreter (they are not proved: the spec
    describes the identity plan only, and ``prove`` refuses them)."""

    rng = random.Random(5)
    sp = sglang_draft_kv.KvSpec(0, True, 4, 4, 16)
    ns, k, d, page = 3, 2, 3, 2
    eps = paths.get("ENTRY_PAGE_SIZE", 1)
    seq = [rng.randint(0, 20) for _ in range(ns)]
    c = max(seq) + d + 2
    width, stride = ns * k * c, ns * k + 1
    span = -(-max(spec.kv_req_to_token_span(s, k, d, page) for s in seq) // eps)
    pool = ns + 1
    rows = rng.sample(range(pool), ns)
    r2t = torch.tensor([rng.randint(0, 30) for _ in range(pool * span)], dtype=torch.int32).reshape(pool, span)
    v2p = torch.tensor([rng.randint(0, 50) for _ in range(64)], dtype=torch.int64)
    kv_i, kv_p = torch.zeros((d, width), dtype=torch.int32), torch.zeros((d, stride), dtype=torch.int32)
    seq_t = torch.tensor(seq, dtype=torch.int64)
    kernel = load_kernel(kv_path, sglang_draft_kv.KERNEL)
    extra = dict(paths)
    if paths.get("TRANSLATE"):
        extra["v2p"] = v2p
    window, sink = paths.get("window_size", 0), paths.get("sink_size", 0)
    _interpreted(lambda: kernel[(d, ns, k)](torch.tensor(rows), r2t, seq_t, kv_i, kv_p, seq_t.repeat_interleave(k),
                                            span, width, stride, sp.bs_upper, sp.iter_upper, sp.num_tokens_upper,
                                            page, **{"window_size": window, "sink_size": sink, **extra}))
    run = sglang_draft_kv.run_kernel(sp, kv_path, sglang_draft_kv.Host(paths=paths))
    scalars = {"num_seqs": ns, "K": k, "D": d, "page_size": page, "C": c, "width": width, "alloc_bs": ns,
               "indptr_stride": stride, "row_stride": span, "pool_rows": pool, "grid0": d, "v2p_len": 64}
    tables = {"seq_len": seq, "P": spec.prefix_sums(seq), "pool_row": rows, "req_to_token": r2t.reshape(-1).tolist(),
              "Q": [sum(seq[z // k] for z in range(j)) for j in range(ns * k + 1)], "v2p": v2p.tolist()}
    writes = selfcheck.concrete_writes(run, scalars, tables, (d, ns, k))
    mem = selfcheck.final_memory(writes, {"kv_indices": [0] * (d * width), "kv_indptr": [0] * (d * stride)})
    assert mem["kv_indices"] == kv_i.reshape(-1).tolist()
    assert mem["kv_indptr"] == kv_p.reshape(-1).tolist()
    with pytest.raises(ValueError, match="identity plan"):
        sglang_draft_kv.prove(sp, kv_path, sglang_draft_kv.Host(paths=paths))
