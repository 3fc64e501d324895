"""``proved_specialization`` and the wrappers' ``require_proved=True``: a launch whose
specialization the manifest does not record as proved is refused before anything is written;
the wrappers pick their constexprs with the plan's choosers (one source of truth)."""

from __future__ import annotations

import json
import random

import pytest
import torch

from specbound import kernels, reference, spec  # before triton: it may set TRITON_INTERPRET
from specbound.kernels import draft_kv, plan, tree_build
from specbound.reference.samples import random_kv_batch, random_tree_batch

# The launches of two-request batches: every constexpr but BLOCK_B is the same compiled and
# interpreted (BLOCK_B 2 interpreted, the budget's compiled), and each is proved through the
# proof with BLOCK_B symbolic that covers it.
KV = dict(topk=2, num_steps=4)
KV_CONSTEXPRS = {"BLOCK_B": draft_kv.kv_blocks(2, 2, 4)[0], "PAIRS": 8, "STEPS": 4, "BLOCK_C": 128,
                 "INDICES": "int64", "INDPTR": "int64"}
TREE = dict(topk=4, depth=3, num_draft_tokens=8, mode=spec.TreeMaskMode.FULL_MASK)
FILL_CONSTEXPRS = {"BLOCK_B": tree_build.fill_blocks(2, 8)[0], "NODES": 8, "BLOCK_C": 256}


def _kv_batch():
    return random_kv_batch(random.Random(0), 2, KV["topk"], KV["num_steps"], 1, seq_lens=[9, 14])


def _tree_batch():
    return random_tree_batch(random.Random(0), 2, TREE["topk"], TREE["depth"], TREE["num_draft_tokens"],
                             max_seq_len=16)


@pytest.fixture
def without(tmp_path, monkeypatch):
    """``without(kernel, constexprs)``: the manifest without the theorems of that specialization
    and of the symbolic-BLOCK_B one covering it becomes the one the wrappers read."""
    def remove(kernel, constexprs):
        manifest = json.loads(open(plan.manifest_path(), encoding="utf-8").read())
        keys = {plan.specialization(kernel, constexprs),
                plan.specialization(kernel, {**constexprs, "BLOCK_B": plan.symbolic_block_b_label()})}
        kept = {tid: e for tid, e in manifest["kernel_theorems"].items()
                if (e["kernel"], e["specialization"]) not in keys}
        assert len(kept) < len(manifest["kernel_theorems"]), keys
        manifest["kernel_theorems"] = kept
        path = tmp_path / "manifest.json"
        path.write_text(json.dumps(manifest))
        monkeypatch.setattr(plan, "MANIFEST_PATH", str(path))
    return remove


def test_the_wrappers_pick_with_the_plan_choosers():
    compiled = not kernels.INTERPRETED
    assert draft_kv.COMPILED == tree_build.COMPILED == compiled
    for bs, k, d in ((1, 1, 1), (3, 4, 3), (200, 8, 5), (256, 2, 8)):
        assert draft_kv.kv_blocks(bs, k, d) == plan.kv_blocks(bs, k, d, compiled=compiled)
        assert tree_build.tree_blocks(bs, d * k) == plan.tree_blocks(bs, d * k, compiled=compiled)
        assert tree_build.fill_blocks(bs, 8) == plan.fill_blocks(bs, 8, compiled=compiled)
    assert draft_kv.kv_blocks(2, KV["topk"], KV["num_steps"]) == tuple(
        KV_CONSTEXPRS[c] for c in ("BLOCK_B", "PAIRS", "STEPS", "BLOCK_C"))


def test_a_proved_launch_runs_with_require_proved():
    assert kernels.proved_specialization("draft_kv_kernel", KV_CONSTEXPRS)
    batch = _kv_batch()
    got = kernels.draft_decode_kv_indices(*batch, **KV, require_proved=True)
    want = reference.draft_decode_kv_indices(*batch, **KV)
    assert all(torch.equal(g, w) for g, w in zip(got, want))
    tb = _tree_batch()
    got = kernels.build_tree(*tb, **TREE, require_proved=True)
    assert torch.equal(got.tree_mask, reference.build_tree(*tb, **TREE).tree_mask)


def test_an_unproved_kv_launch_is_refused_before_any_write(without):
    without("draft_kv_kernel", KV_CONSTEXPRS)
    assert not kernels.proved_specialization("draft_kv_kernel", KV_CONSTEXPRS)
    assert kernels.proved_specialization("draft_kv_kernel", {**KV_CONSTEXPRS, "BLOCK_B": 1, "PAIRS": 16,
                                                             "STEPS": 8, "BLOCK_C": 128, "INDICES": "int32",
                                                             "INDPTR": "int32"})
    batch = _kv_batch()
    out = reference.draft_decode_kv_indices(*batch, **KV)[0].shape
    kv_indices = torch.full(out, -7, dtype=torch.int64)
    with pytest.raises(kernels.UnprovedSpecialization, match=r"draft_kv_kernel .*KV\[BLOCK_B=\d+,PAIRS=8") as info:
        kernels.draft_decode_kv_indices(*batch, **KV, kv_indices=kv_indices, require_proved=True)
    assert "require_proved=True" in str(info.value) and "num_seqs=2" in str(info.value)
    assert (kv_indices == -7).all()
    # without require_proved the same launch goes ahead
    kernels.draft_decode_kv_indices(*batch, **KV, kv_indices=kv_indices)
    assert not (kv_indices == -7).all()


def test_an_unproved_prefix_fill_refuses_the_tree_build_too(without):
    """The tree build's specialization is proved, the prefix fill's is not: neither launches."""
    without("fill_prefix_kernel", FILL_CONSTEXPRS)
    tb = _tree_batch()
    n = TREE["num_draft_tokens"]
    positions = torch.full((2 * n,), -7, dtype=torch.int64)
    with pytest.raises(kernels.UnprovedSpecialization, match=r"fill_prefix_kernel .*FILL-PREFIX\[BLOCK_B=\d+,NODES=8"):
        kernels.build_tree(*tb, **TREE, positions=positions, require_proved=True)
    assert (positions == -7).all()
    # QLEN_ONLY launches no prefix fill, and its tree build is proved
    kernels.build_tree(*tb, **{**TREE, "mode": spec.TreeMaskMode.QLEN_ONLY}, require_proved=True)
    # strict (a malformed tree is refused) is unchanged and independent
    kernels.build_tree(*tb, **{**TREE, "mode": spec.TreeMaskMode.QLEN_ONLY}, strict=True)


def test_require_proved_must_be_a_bool():
    with pytest.raises(spec.SpecTypeError, match="require_proved"):
        kernels.draft_decode_kv_indices(*_kv_batch(), **KV, require_proved=1)
    with pytest.raises(spec.SpecTypeError, match="require_proved"):
        kernels.build_tree(*_tree_batch(), **TREE, require_proved="yes")
