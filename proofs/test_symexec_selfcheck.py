"""The executor is itself tested: its symbolic store addresses, evaluated at concrete points,
equal the cells the checked interpreter records on random launches of every kernel."""

from __future__ import annotations

import random

import pytest

from specbound import spec
from specbound.proofs.symexec import selfcheck
from specbound.proofs.symexec.verifiers import draft_kv, fill_prefix, tree_build

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
    from specbound.kernels.plan import kv_plan
    from specbound.reference.samples import random_kv_batch

    rng = random.Random(seed)
    sp = draft_kv.KvSpec(2, 8, 4, 16)
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
    plan = kv_plan({"req_pool_indices_ptr": batch.req_pool_indices, "req_to_token_ptr": r2t,
                    "seq_lens_ptr": batch.seq_lens, "prefix_ptr": prefix, "kv_indices_ptr": kv_indices,
                    "kv_indptr_ptr": kv_indptr},
                   num_seqs=ns, topk=k, num_steps=d, page_size=page, width=width, indptr_stride=stride,
                   r2t_stride0=r2t.stride(0), r2t_stride1=r2t.stride(1), block_b=sp.BLOCK_B, pairs=sp.PAIRS,
                   steps=sp.STEPS, block_c=sp.BLOCK_C)
    (grid,) = plan.grid

    def launch():
        plan.launch(draft_kv_kernel)
    written = _recorded(launch)
    run = draft_kv.symbolic_run(sp)
    scalars = {"num_seqs": ns, "K": k, "D": d, "page_size": page, "width": width, "indptr_stride": stride,
               "r2t_stride0": r2t.stride(0), "r2t_stride1": r2t.stride(1)}
    contents = {"seq_len": seq, "P": prefix.tolist(), "pool_row": batch.req_pool_indices.tolist()}
    cells = selfcheck.symbolic_cells(run, scalars, contents, grid, _loops(seq, sp.BLOCK_B, sp.BLOCK_C))
    assert cells["kv_indices"] == written["kv_indices_ptr"]
    assert cells["kv_indptr"] == written["kv_indptr_ptr"]


@pytest.mark.parametrize("mode,seed", [(m, s) for m in (0, 1, 2) for s in range(2)])
def test_tree_addresses_match_the_interpreter(mode, seed):
    from specbound.reference.samples import random_tree_batch
    from specbound.kernels.plan import fill_plan, tree_plan
    from specbound.kernels.tree_build import build_tree_kernel, fill_prefix_kernel
    from specbound.reference import validation

    rng = random.Random(100 + seed)
    sp = tree_build.TreeSpec(mode, 3, 2, 8)
    k, d = 2, 3
    n = rng.randint(2, 8)
    bs_ = rng.randint(1, 5)
    tb = random_tree_batch(rng, bs_, k, d, n, max_seq_len=30, malformed=0.2)
    seq = tb.seq_lens.tolist()
    args = validation.validate_build_tree_args(tb.parent_list, tb.selected_index, tb.seq_lens, topk=k, depth=d,
                                               num_draft_tokens=n, mode=mode, fill_prefix_mask=False)
    prefix = torch.tensor(args.prefix[:-1], dtype=torch.int64)
    fill = fill_prefix.FillSpec(2, 8, 16)
    plan = tree_plan({"parent_list_ptr": args.parent_list, "selected_index_ptr": args.selected_index,
                      "seq_lens_ptr": args.seq_lens, "prefix_ptr": prefix, "tree_mask_ptr": args.tree_mask,
                      "positions_ptr": args.positions, "retrive_index_ptr": args.retrive_index,
                      "next_token_ptr": args.retrive_next_token, "next_sibling_ptr": args.retrive_next_sibling},
                     bs=bs_, topk=k, depth=d, n=n, mode=mode, block_b=sp.BLOCK_B, nodes=sp.NODES)
    fplan = fill_plan({"tree_mask_ptr": args.tree_mask, "seq_lens_ptr": args.seq_lens, "prefix_ptr": prefix},
                      bs=bs_, n=n, block_b=fill.BLOCK_B, nodes=fill.NODES, block_c=fill.BLOCK_C)
    assert plan.constexprs["DEPTH"] == sp.DEPTH
    (grid,) = plan.grid

    def launch():
        plan.launch(build_tree_kernel)
        if mode == 0:
            fplan.launch(fill_prefix_kernel)
    from specbound.kernels import INTERPRETED, checked_interpreter
    if not INTERPRETED:
        pytest.skip("compiled kernels")
    with checked_interpreter(record_footprint=True) as session:
        launch()
    scalars = {"bs": bs_, "K": k, "n": n, "pl_width": plan.args["pl_width"], "sel_width": plan.args["sel_width"]}
    contents = {"seq_len": seq, "P": prefix.tolist(),
                "selected_index": tb.selected_index.reshape(-1).tolist(),
                "parent_list": tb.parent_list.reshape(-1).tolist()}
    run = tree_build.symbolic_run(sp)
    cells = selfcheck.symbolic_cells(run, scalars, contents, grid, lambda pid: [])
    written = session.written("build_tree_kernel")
    for name, arg in (("tree_mask", "tree_mask_ptr"), ("positions", "positions_ptr"),
                      ("retrive_index", "retrive_index_ptr"), ("retrive_next_token", "next_token_ptr"),
                      ("retrive_next_sibling", "next_sibling_ptr")):
        assert cells[name] == written[arg], name
    if mode == 0:
        frun = fill_prefix.symbolic_run(fill)
        fcells = selfcheck.symbolic_cells(frun, {"bs": bs_, "n": n}, {"seq_len": seq, "P": prefix.tolist()}, fplan.grid[0],
                                          _loops(seq, fill.BLOCK_B, fill.BLOCK_C))
        assert fcells.get("tree_mask", set()) == session.written("fill_prefix_kernel").get("tree_mask_ptr", set())
