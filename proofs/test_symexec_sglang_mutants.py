"""Every theorem family about sglang's own Triton kernels is shown to fail: for each kernel x
property family the manifest lists (``SGLANG-DRAFT-KV``, ``SGLANG-TREE-FULL``,
``SGLANG-TREE-QLEN`` x IN-BOUNDS, NO-WRAP, ...), one bug is planted in a copy of sglang's
kernel source and that property is refuted by a counterexample, replayed on the edited kernel
under the checked interpreter (the one exception says why it is not replayed).

The copy is a small sglang-shaped tree under a tmp dir (``sglang/kernels/ops/speculative/``),
written from the installed sglang's source text (CI installs sglang 0.5.23 with ``--no-deps``;
nothing is downloaded); without sglang the tests skip.  Each refutation is restricted to its
own property, so each test is red when the verifier stops checking that property
(``test_a_property_the_verifier_stops_checking_lets_its_edit_survive`` shows it once).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from specbound import manifest
from specbound.engines.sglang import draft_kv_model as sglang_draft_kv, tree_model as sglang_tree
from specbound.proofs.symexec.concretise import concretise
from specbound.proofs.symexec.obligations import check

pytest.importorskip("specbound.kernels")  # before triton: it sets TRITON_INTERPRET
pytest.importorskip("torch")

KV = sglang_draft_kv.KvSpec(0, False)   # lane bounds symbolic, as the manifest's kv theorems are
# batch_size symbolic (every batch of the envelope), as the manifest's tree theorems are
FULL = sglang_tree.TreeSpec(2, 2, 4, 0)
QLEN = sglang_tree.TreeSpec(2, 2, 4, 1)
# a seq_len near 2^31 (an int32 wrap); the QLEN_ONLY mask does not grow with it, so it replays
BIG_SEQ_LEN = {"limits": {"C": (1, 2**31 - 1)}, "content_box": {"seq_len": (0, 2**31 - 1), "P": (0, 2**33)}}


@dataclass(frozen=True)
class Edit:
    """One bug planted in sglang's kernel source: ``old`` (which must occur exactly once) becomes
    ``new``; ``family`` is the manifest's ``<kernel>/<property>`` it must refute."""

    family: str
    old: str
    new: str
    why: str
    expect: tuple = ("oob",)
    box: dict = field(default_factory=dict, hash=False)
    replayed: bool = True


EDITS = (
    Edit("SGLANG-DRAFT-KV/IN-BOUNDS",
         "seq_len + topk_id * num_steps + tl.arange(0, iter_upper),",
         "seq_len + topk_id * num_steps + tl.arange(0, iter_upper) + 1,",
         "the extension reads one token past the branch's draft slots: past req_to_token's last row"),
    Edit("SGLANG-DRAFT-KV/NO-WRAP",
         "\n    kv_indices += kv_indices_stride * iters\n",
         "\n    kv_indices += kv_indices_stride * (iters + 1)\n",
         "the kv_indices row offset taken 1-based: stride * num_steps passes 2^31 where sglang's own "
         "sizing keeps stride * (num_steps - 1) below it (an int32 product)",
         expect=("wrap",), box={"wrap_box": True}),
    Edit("SGLANG-DRAFT-KV/NO-TRUNCATION",
         "bs_offset = tl.arange(0, num_tokens_upper)\n        zid",
         "bs_offset = tl.arange(0, bs_upper)\n        zid",
         "kv_indptr's sum over the branches before it runs over bs_upper lanes (the per-request bound) "
         "instead of num_tokens_upper: with topk > 1 the last branches' positions are left out",
         expect=("output",)),
    Edit("SGLANG-DRAFT-KV/RACE-FREE",
         "topk_id * (seq_len_w + iters)",
         "topk_id * seq_len_w",
         "a branch's segment stride without its draft slots: each branch's extension lands on the next "
         "branch's prefix, stored by another program",
         expect=("race", "output")),
    Edit("SGLANG-DRAFT-KV/FOOTPRINT",
         "seq_len + topk_id * num_steps + tl.arange(0, iter_upper),",
         "seq_len + topk_id * (num_steps - 1) + tl.arange(0, iter_upper),",
         "branches read their extension num_steps - 1 apart: every read and store in bounds and its own, "
         "but branches share draft tokens (only the stored value shows it)",
         expect=("output",)),
    Edit("SGLANG-TREE-FULL/IN-BOUNDS",
         "seq_tree_idx + (seq_len + draft_token_num) * draft_tokenx + seq_len + 1",
         "seq_tree_idx + (seq_len + draft_token_num) * draft_tokenx + seq_len + 2",
         "FULL_MASK tree columns start one cell late: the last request's last row ends past the mask"),
    Edit("SGLANG-TREE-FULL/NO-WRAP",
         "seq_len_prefix_sum = tl.load(seq_len_prefix_sum_ptr + batch_idx)",
         "seq_len_prefix_sum = tl.load(seq_len_prefix_sum_ptr + batch_idx).to(tl.int32)",
         "the prefix sum read as int32: the FULL_MASK request base P[b] * n wraps once it passes 2^31 cells "
         "(a mask of 2^31 cells: found by the solver, too large to replay)", replayed=False),
    Edit("SGLANG-TREE-FULL/RACE-FREE",
         "tl.cast(draft_token_num * draft_token_num * batch_idx, seq_len.dtype)",
         "tl.cast(draft_token_num * batch_idx, seq_len.dtype)",
         "FULL_MASK request base with b*n instead of b*n*n: requests' rows overlap, stored by two programs",
         expect=("race", "output")),
    Edit("SGLANG-TREE-FULL/FOOTPRINT",
         "current_token_idx = retrieve_index_offset + i\n",
         "current_token_idx = retrieve_index_offset + i - 1\n",
         "retrive_index holds its neighbour's cell: every store in bounds and its own, a wrong value",
         expect=("output",)),
    Edit("SGLANG-TREE-FULL/WALK-BOUNDED",
         "for _ in range(depth):",
         "for _ in range(depth + 1):",
         "the root-ward walk runs depth + 1 steps: a cycle places a draft token past seq_len + depth",
         expect=("output",)),
    Edit("SGLANG-TREE-QLEN/IN-BOUNDS",
         "+ draft_token_num * draft_tokenx\n                + 1\n",
         "+ draft_token_num * draft_tokenx\n                + 2\n",
         "QLEN_ONLY rows start one cell late: the last request's last row ends past the mask"),
    Edit("SGLANG-TREE-QLEN/NO-WRAP",
         "seq_len = tl.load(verified_seq_len_ptr + batch_idx)\n",
         "seq_len = tl.load(verified_seq_len_ptr + batch_idx).to(tl.int32)\n",
         "seq_len read as int32: position + seq_len wraps for seq_len + depth >= 2^31 (Triton's int32 "
         "overflow check, or a negative position)", expect=("wrap", "output"), box=BIG_SEQ_LEN),
    Edit("SGLANG-TREE-QLEN/RACE-FREE",
         "draft_token_num * draft_token_num * batch_idx\n                + draft_token_num * draft_tokenx",
         "draft_token_num * (draft_token_num - 1) * batch_idx\n                + draft_token_num * draft_tokenx",
         "QLEN_ONLY request base b*n*(n - 1): a request's last row is the next request's first, stored by "
         "two programs", expect=("race", "output")),
    Edit("SGLANG-TREE-QLEN/FOOTPRINT",
         "for i in range(draft_token_num - 1):\n            tl.store(tree_mask_ptr + token_tree_idx + i, 0)",
         "for i in range(draft_token_num - 2):\n            tl.store(tree_mask_ptr + token_tree_idx + i, 0)",
         "the row's tail is cleared one column short: the last column of every row is never written "
         "(only coverage sees it)", expect=("output",)),
    Edit("SGLANG-TREE-QLEN/WALK-BOUNDED",
         "position + seq_len,\n",
         "position + seq_len + 1,\n",
         "positions one past (the verified token counted twice): a node at depth D lands past seq_len + D",
         expect=("output",)),
)
BY_FAMILY = {e.family: e for e in EDITS}
assert len(BY_FAMILY) == len(EDITS), "one edit per family"


def _module(family):
    return sglang_draft_kv if family.startswith("SGLANG-DRAFT-KV/") else sglang_tree


def _spec(family):
    return {"SGLANG-DRAFT-KV": KV, "SGLANG-TREE-FULL": FULL, "SGLANG-TREE-QLEN": QLEN}[family.split("/")[0]]


def planted_tree(root, dest, module, old: str, new: str) -> str:
    """A small sglang-shaped tree under ``dest`` holding ``module``'s kernel file from the sglang
    at ``root`` with ``old`` replaced by ``new``; the path of the edited file."""
    src = root / module.SOURCE
    if not src.is_file():
        pytest.skip(f"this sglang keeps {module.KERNEL} elsewhere")
    text = src.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"the planted edit no longer matches sglang's source once: {old!r}"
    out = dest / "sglang" / module.SOURCE
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text.replace(old, new), encoding="utf-8")
    return str(out)


def refute(family: str, path: str):
    """The family's property refuted on the kernel at ``path``, replayed there."""
    prop = family.split("/")[1]
    e = BY_FAMILY[family]
    if _module(family) is sglang_draft_kv:
        return sglang_draft_kv.refute_without(KV, path, props=(prop,), **e.box)
    return sglang_tree.refute_run(_spec(family), path, props=(prop,), expect=e.expect, **e.box)


def test_every_sglang_family_has_a_planted_edit():
    """The edits cover every kernel x property family of sglang's kernels in the manifest."""
    families = {f"{e['kernel']}/{e['property']}" for e in manifest.load()["sglang_theorems"].values()}
    assert families == set(BY_FAMILY)


@pytest.mark.parametrize("family", [e.family for e in EDITS if e.replayed])
def test_planted_edit_refutes_its_property(sglang_root, tmp_path, family):
    e = BY_FAMILY[family]
    path = planted_tree(sglang_root, tmp_path, _module(family), e.old, e.new)
    ref = refute(family, path)
    if ref.status != "refuted" and "cannot allocate" in ref.detail:
        pytest.skip(f"this machine refuses the replay buffers: {ref.detail}")
    assert ref.status == "refuted", f"{family}: {e.why}: {ref.detail}"
    assert ref.verdict in e.expect, (ref.verdict, ref.detail)
    assert ref.obligation and ref.counterexample, ref


@pytest.mark.parametrize("family", [e.family for e in EDITS if not e.replayed])
def test_planted_edit_refutes_its_property_without_replay(sglang_root, tmp_path, family):
    """A wrap that needs a mask of 2^31 cells: the solver's counterexample, made concrete in a
    box wide enough for it, on an obligation of the edited line."""

    e = BY_FAMILY[family]
    prop = family.split("/")[1]
    sp = _spec(family)
    path = planted_tree(sglang_root, tmp_path, _module(family), e.old, e.new)
    run = sglang_tree.run_kernel(sp, path)
    failed = [(ob, out) for ob in sglang_tree.obligations(run, prop)
              for out in [check(ob, run.functions, witness=False)] if out.status == "counterexample"]
    assert failed, f"{family}: {e.why}: every {prop} obligation proved"
    ob, _out = failed[0]
    batch = sglang_tree.REPLAY_LIMITS["bs"]
    conc = concretise(run, ob, {"C": (1, 2**31 - 1), "bs": batch}, batch_cap=batch[1],
                      content_box={"seq_len": (0, 2**31 - 1), "P": (0, 2**33)})
    assert conc is not None, ob.id
    seq = [conc["_contents"]["seq_len"](i) for i in range(conc["bs"])]
    assert sum(seq[:-1]) * sp.n >= 2**31, (ob.id, seq)   # the request base P[b] * n passes int32


def test_the_real_kernel_survives_the_same_refutations(sglang_root):
    """Without the edits nothing is refuted (the same property-restricted searches)."""
    kv = str(sglang_root / sglang_draft_kv.SOURCE)
    assert sglang_draft_kv.refute_without(KV, kv, props=("RACE-FREE",)).status == "survived"
    tree = str(sglang_root / sglang_tree.SOURCE)
    assert sglang_tree.refute_run(QLEN, tree, props=("FOOTPRINT",)).status == "survived"


def test_a_property_the_verifier_stops_checking_lets_its_edit_survive(sglang_root, tmp_path, monkeypatch):
    """The refutations above rest on the property's own obligations: with the walk bound no
    longer checked, the planted unbounded walk survives."""
    e = BY_FAMILY["SGLANG-TREE-QLEN/WALK-BOUNDED"]
    path = planted_tree(sglang_root, tmp_path, sglang_tree, e.old, e.new)
    monkeypatch.setattr(sglang_tree, "walk_obligations", lambda run: [])
    assert refute("SGLANG-TREE-QLEN/WALK-BOUNDED", path).status == "survived"
