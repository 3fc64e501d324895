"""The executor is itself tested: its symbolic store addresses, evaluated at concrete points,
equal the cells the checked interpreter records on random launches of every kernel."""

from __future__ import annotations

import random

import pytest

from specbound import spec
from specbound.proofs.symexec import models, selfcheck

pytest.importorskip("specbound.kernels")  # before triton: it sets TRITON_INTERPRET
torch = pytest.importorskip("torch")


def _recorded(launch):
    from specbound.kernels import INTERPRETED, checked_interpreter
    if not INTERPRETED:
        pytest.skip("kernels are compiled: the checked interpreter does not apply")
    with checked_interpreter(record_footprint=True) as session:
        launch()
    return session.written()


def _loops(seq, block_b, block_c):
    def values(pid):
        rows = seq[pid * block_b:(pid + 1) * block_b]
        return range(0, max(rows + [0]), block_c)
    return values


@pytest.mark.parametrize("seed", range(3))
def test_kv_addresses_match_the_interpreter(seed):
    from specbound.kernels.draft_kv import draft_kv_kernel
    from specbound.reference.samples import random_kv_batch

    rng = random.Random(seed)
    sp = models.KvSpec(2, 8, 4, 16)
    ns, k, d, page = rng.randint(1, 5), rng.choice([1, 2]), rng.randint(1, 4), rng.choice([1, 2, 4])
    while d * k > sp.PAIRS:
        k = 1
    batch = random_kv_batch(rng, ns, k, d, page, max_seq_len=40)
    seq = batch.seq_lens.tolist()
    used = spec.draft_kv_indices_used_len(sum(seq), k, ns * k, d)
    width, stride = used + rng.randint(0, 5), ns * k + 1 + rng.randint(0, 2)
    kv_indices = torch.full((d, width), -1, dtype=torch.int64)
    kv_indptr = torch.full((d, stride), -1, dtype=torch.int64)
    prefix = torch.tensor(spec.prefix_sums(seq)[:-1], dtype=torch.int64)
    r2t = batch.req_to_token.to(torch.int64)
    grid = -(-ns // sp.BLOCK_B)

    def launch():
        draft_kv_kernel[(grid,)](batch.req_pool_indices, r2t, batch.seq_lens, prefix, kv_indices, kv_indptr,
                                 ns, k, d, page, width, stride, r2t.stride(0), r2t.stride(1),
                                 BLOCK_B=sp.BLOCK_B, PAIRS=sp.PAIRS, STEPS=sp.STEPS, BLOCK_C=sp.BLOCK_C)
    written = _recorded(launch)
    run = models.kv_run(sp)
    scalars = {"num_seqs": ns, "K": k, "D": d, "page_size": page, "width": width, "indptr_stride": stride,
               "r2t_stride0": r2t.stride(0), "r2t_stride1": r2t.stride(1)}
    contents = {"seq_len": seq, "P": prefix.tolist(), "pool_row": batch.req_pool_indices.tolist()}
    cells = selfcheck.symbolic_cells(run, scalars, contents, grid, _loops(seq, sp.BLOCK_B, sp.BLOCK_C))
    assert cells["kv_indices"] == written["kv_indices_ptr"]
    assert cells["kv_indptr"] == written["kv_indptr_ptr"]


@pytest.mark.parametrize("mode,seed", [(m, s) for m in (0, 1, 2) for s in range(2)])
def test_tree_addresses_match_the_interpreter(mode, seed):
    from specbound.reference.samples import random_tree_batch
    from specbound.kernels.tree_build import build_tree_kernel, fill_prefix_kernel
    from specbound.reference import validation

    rng = random.Random(100 + seed)
    sp = models.TreeSpec(mode, 3, 2, 8)
    k, d = 2, 3
    n = rng.randint(2, 8)
    bs_ = rng.randint(1, 5)
    tb = random_tree_batch(rng, bs_, k, d, n, max_seq_len=30, malformed=0.2)
    seq = tb.seq_lens.tolist()
    args = validation.validate_build_tree_args(tb.parent_list, tb.selected_index, tb.seq_lens, topk=k, depth=d,
                                               num_draft_tokens=n, mode=mode, fill_prefix_mask=False)
    prefix = torch.tensor(args.prefix[:-1], dtype=torch.int64)
    grid = -(-bs_ // sp.BLOCK_B)
    fill = models.FillSpec(2, 8, 16)

    def launch():
        build_tree_kernel[(grid,)](args.parent_list, args.selected_index, args.seq_lens, prefix, args.tree_mask,
                                   args.positions, args.retrive_index, args.retrive_next_token,
                                   args.retrive_next_sibling, bs_, k, spec.parent_list_width(k, d),
                                   spec.selected_index_width(n), n, MODE=mode, DEPTH=d, BLOCK_B=sp.BLOCK_B,
                                   NODES=sp.NODES)
        if mode == 0:
            fill_prefix_kernel[(grid,)](args.tree_mask, args.seq_lens, prefix, bs_, n,
                                        BLOCK_B=fill.BLOCK_B, NODES=fill.NODES, BLOCK_C=fill.BLOCK_C)
    from specbound.kernels import INTERPRETED, checked_interpreter
    if not INTERPRETED:
        pytest.skip("compiled kernels")
    with checked_interpreter(record_footprint=True) as session:
        launch()
    scalars = {"bs": bs_, "K": k, "n": n, "pl_width": spec.parent_list_width(k, d),
               "sel_width": spec.selected_index_width(n)}
    contents = {"seq_len": seq, "P": prefix.tolist(),
                "selected_index": tb.selected_index.reshape(-1).tolist(),
                "parent_list": tb.parent_list.reshape(-1).tolist()}
    run = models.tree_run(sp)
    cells = selfcheck.symbolic_cells(run, scalars, contents, grid, lambda pid: [])
    written = session.written("build_tree_kernel")
    for name, arg in (("tree_mask", "tree_mask_ptr"), ("positions", "positions_ptr"),
                      ("retrive_index", "retrive_index_ptr"), ("retrive_next_token", "next_token_ptr"),
                      ("retrive_next_sibling", "next_sibling_ptr")):
        assert cells[name] == written[arg], name
    if mode == 0:
        frun = models.fill_run(fill)
        fcells = selfcheck.symbolic_cells(frun, {"bs": bs_, "n": n}, {"seq_len": seq, "P": prefix.tolist()}, grid,
                                          _loops(seq, fill.BLOCK_B, fill.BLOCK_C))
        assert fcells.get("tree_mask", set()) == session.written("fill_prefix_kernel").get("tree_mask_ptr", set())
