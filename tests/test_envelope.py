"""The serving envelope (``kernels/plan.py``): its enumeration of the specializations the block
choosers pick is exact (checked against the choosers on every batch size), only BLOCK_B
depends on the mode, and every specialization of the envelope, compiled or interpreted, is
proved in ``proofs/manifest.json`` (through a proof with BLOCK_B symbolic).  No torch: the
plan module is read by path."""

from __future__ import annotations

import pytest

from specbound.proofs.symexec.kernel_files import torch_free_module
from specbound.proofs.symexec.verifiers import draft_kv, fill_prefix, tree_build

plan = torch_free_module("plan")
ENV = plan.ENVELOPE
MODES = (True, False)   # compiled, interpreted


def _draft_trees(d):
    """The n of the envelope some topk makes a valid tree of depth d."""
    return [n for n in range(ENV.num_draft_tokens[0], ENV.num_draft_tokens[1] + 1)
            if any(plan.spec.conjunction(plan.spec.tree_shape_ok(k, d, n)) for k in range(1, ENV.topk[1] + 1))]


def _picked(kernel, compiled):
    """Every specialization (as named) the choosers pick on every batch size, topk, num_steps
    and n of the envelope (int64 / int32 outputs for the kv kernel)."""
    out = set()
    batches = range(ENV.batch[0], ENV.batch[1] + 1)
    for d in range(ENV.num_steps[0], ENV.num_steps[1] + 1):
        if kernel == "draft_kv_kernel":
            for k in range(ENV.topk[0], ENV.topk[1] + 1):
                for bs in batches:
                    bb, pairs, st, bc = plan.kv_blocks(bs, k, d, compiled=compiled)
                    out.add(plan.specialization(kernel, {"BLOCK_B": bb, "PAIRS": pairs, "STEPS": st, "BLOCK_C": bc,
                                                         "INDICES": "int64", "INDPTR": "int32"}))
            continue
        for n in _draft_trees(d):
            for bs in batches:
                bb, nodes = plan.tree_blocks(bs, n, compiled=compiled)
                if kernel == "build_tree_kernel":
                    out.update(plan.specialization(kernel, {"MODE": mode, "DEPTH": d, "BLOCK_B": bb, "NODES": nodes})
                               for mode in (0, 1, 2) if mode != 2 or n <= 32)
                else:
                    fb, fc = plan.fill_blocks(bs, nodes, compiled=compiled)
                    out.add(plan.specialization(kernel, {"BLOCK_B": fb, "NODES": nodes, "BLOCK_C": fc}))
    return out


def _brute(kernel, compiled, enumerate_=None):
    """What the choosers pick on the whole envelope that the enumeration lacks."""
    enumerate_ = enumerate_ or plan.envelope_specializations
    return _picked(kernel, compiled) - set(enumerate_(kernel, compiled=compiled))


@pytest.mark.parametrize("compiled", MODES)
@pytest.mark.parametrize("kernel", plan.KERNELS)
def test_bucket_enumeration_is_exact(kernel, compiled):
    """Every specialization the choosers pick on the envelope is enumerated, and every
    enumerated one is picked by its own example batch (inside the envelope)."""
    assert _brute(kernel, compiled) == set()
    for key, entry in plan.envelope_specializations(kernel, compiled=compiled).items():
        ex = entry["example"]
        assert ENV.batch[0] <= ex["batch"] <= ENV.batch[1] and ENV.num_steps[0] <= ex["num_steps"] <= ENV.num_steps[1]
        assert plan.specialization(kernel, entry["constexprs"]) == key


def test_a_skipped_bucket_is_caught():
    """Planted: the enumeration forgets the largest batch bucket; the brute force names what it
    misses."""
    real = plan.pow2_buckets

    def drop_last(lo, hi):
        return real(lo, hi)[:-1]
    try:
        plan.pow2_buckets = drop_last
        assert _brute("draft_kv_kernel", False, plan.envelope_specializations)
        assert _brute("build_tree_kernel", False, plan.envelope_specializations)
    finally:
        plan.pow2_buckets = real


def _least_power_of_two_at_least(x: int) -> int:
    p = 1
    while p < x:
        p *= 2
    return p


@pytest.mark.parametrize("pow2", [plan.pow2, lambda x: 1 << int(x).bit_length()], ids=["plan", "planted"])
def test_pow2_is_the_least_power_of_two_at_least_x(pow2):
    """The one power-of-two helper (the block choosers', the audit's lane bounds, sglang's
    ``next_power_of_2`` in the drop-in tests) against its definition; planted: one too
    large at every power of two."""
    wrong = [x for x in range(-3, 1100) if pow2(x) != _least_power_of_two_at_least(x)]
    if pow2 is plan.pow2:
        assert wrong == []
    else:
        assert 1 in wrong and 1024 in wrong and 3 not in wrong


def test_pow2_buckets_take_each_value_once():
    assert plan.pow2_buckets(1, 256) == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert plan.pow2_buckets(1, 100) == [1, 2, 4, 8, 16, 32, 64, 100]
    assert plan.pow2_buckets(3, 3) == [3]


def test_verifiers_name_specializations_as_the_plan_does():
    """One naming: a verifier's spec and the plan's specialization() agree, so the manifest's
    entries are what proved_specialization looks up."""
    kv = draft_kv.KvSpec(2, 16, 4, 128, "int64", "int32")
    assert ("KV", kv.label) == plan.specialization("draft_kv_kernel", kv.constexprs)
    tr = tree_build.TreeSpec(2, 3, 4, 16)
    assert (tr.name, tr.label) == plan.specialization("build_tree_kernel", tr.constexprs)
    assert tr.label == "NODES=16,DEPTH=3,BLOCK_B=4" and tr.name == "BUILD-TREE-BITPACK"
    fi = fill_prefix.FillSpec(2, 8, 16)
    assert plan.specialization("fill_prefix_kernel", {"BLOCK_B": 2, "NODES": 8, "BLOCK_C": 16}) == (fi.name, fi.label)
    with pytest.raises(KeyError, match="lack 'INDPTR'"):
        plan.specialization("draft_kv_kernel", {"BLOCK_B": 1, "PAIRS": 1, "STEPS": 1, "BLOCK_C": 16, "INDICES": "int64"})
    with pytest.raises(KeyError, match="unknown kernel"):
        plan.specialization("nope", {})


def test_the_proof_selection_is_in_all_specs():
    """``prove --kernels --all`` proves every specialization proof_selection names."""
    from specbound.proofs.symexec import theorems

    specs = theorems.all_specs()
    for kind, kernel in (("kv", "draft_kv_kernel"), ("tree", "build_tree_kernel"), ("fill", "fill_prefix_kernel")):
        named = {(sp.name, sp.label) for sp in specs[kind]}
        assert set(plan.proof_selection(kernel)) <= named, kernel


def test_the_manifest_proves_the_whole_envelope():
    """Every specialization of the envelope, compiled (GPU) or interpreted, is proved in
    proofs/manifest.json: proof_selection's symbolic proofs are recorded, and cover all."""
    proved = plan.proved_specializations(plan.manifest_path())
    for kernel in plan.KERNELS:
        assert set(plan.proof_selection(kernel)) - proved == set(), kernel
    rows = plan.envelope_coverage(proved)
    assert len(rows) == 2 * len(plan.KERNELS)
    assert [(r["kernel"], r["compiled"], r["unproved"]) for r in rows if r["unproved"]] == []


def _only_block_b_follows_the_mode():
    """Launches (over batches in and beyond the envelope, default and huge tile budgets) whose
    BLOCK_B no symbolic proof covers, or whose other constexprs differ between the modes."""
    wrong = []
    for bs in (1, 2, 3, 64, 200, 256, 257, 5000):
        for k, d in ((1, 1), (4, 3), (8, 8)):
            for budget in (None, 1 << 30):
                for compiled in MODES:
                    tree = plan.tree_blocks(bs, k * d, compiled=compiled, tile_budget=budget)
                    for got in (plan.kv_blocks(bs, k, d, compiled=compiled, tile_budget=budget), tree,
                                plan.fill_blocks(bs, tree[1], compiled=compiled, tile_budget=budget)):
                        if got[0] not in plan.symbolic_block_b_values():
                            wrong.append(("BLOCK_B", bs, k, d, budget, compiled, got))
            others = [(plan.kv_blocks(bs, k, d, compiled=c)[1:], plan.tree_blocks(bs, k * d, compiled=c)[1:],
                       plan.fill_blocks(bs, 8, compiled=c)[1:]) for c in MODES]
            if others[0] != others[1]:
                wrong.append(("mode", bs, k, d, others))
    return wrong


def test_only_block_b_follows_the_mode_and_every_block_b_is_covered(monkeypatch):
    """What lets one proof per specialization cover both modes: every constexpr but BLOCK_B is
    the same compiled and interpreted, and every BLOCK_B any chooser returns is a power of two
    up to BLOCK_B_MAX.  Planted: a BLOCK_B chooser without the cap (a 1-node tree at the
    compiled budget takes 2048 requests) is caught."""
    assert _only_block_b_follows_the_mode() == []
    assert plan.BLOCK_B_MAX == plan.pow2(ENV.batch[1])   # the largest batch fits one program
    for bs in (1, 3, 64, 256):   # compiled, nothing of the batch is read
        assert plan.kv_blocks(bs, 4, 3, compiled=True) == plan.kv_blocks(1, 4, 3, compiled=True)
        assert plan.tree_blocks(bs, 16, compiled=True) == plan.tree_blocks(1, 16, compiled=True)
    # interpreted, BLOCK_B still follows the batch (small tests stay fast)
    assert plan.tree_blocks(1, 16, compiled=False) != plan.tree_blocks(256, 16, compiled=False)

    def uncapped(budget_, tile, batch, compiled):
        widest = plan.pow2(max(1, budget_ // tile) + 1) // 2
        return widest if compiled else min(widest, plan.pow2(max(batch, 1)))
    monkeypatch.setattr(plan, "_block_b", uncapped)
    assert ("BLOCK_B", 1, 1, 1, None, True, (2048, 1)) in _only_block_b_follows_the_mode()


def _without_symbolic(manifest: dict, kernel: str) -> dict:
    """``manifest`` without the proofs of ``kernel``'s proof_selection (its symbolic ones)."""
    gone = set(plan.proof_selection(kernel))
    return {**manifest, "kernel_theorems": {tid: e for tid, e in manifest["kernel_theorems"].items()
                                            if (e["kernel"], e["specialization"]) not in gone}}


def test_coverage_counts_the_unproved(tmp_path):
    """envelope_coverage reports what a manifest leaves out: one removed symbolic proof is one
    GPU specialization fewer and every interpreted one it covered."""
    import json

    manifest = json.loads(open(plan.manifest_path(), encoding="utf-8").read())
    full = plan.envelope_coverage(plan.proved_in(manifest))
    key, entry = next(iter(plan.proof_selection("fill_prefix_kernel").items()))
    manifest["kernel_theorems"] = {tid: e for tid, e in manifest["kernel_theorems"].items()
                                   if (e["kernel"], e["specialization"]) != key}
    less = plan.envelope_coverage(plan.proved_in(manifest))
    symbolic = fill_prefix.FillSpec(**entry["constexprs"])
    for compiled in MODES:
        row = lambda cov: next(r for r in cov if r["kernel"] == "fill_prefix_kernel" and r["compiled"] == compiled)
        covered = [k for k, e in plan.envelope_cached("fill_prefix_kernel", compiled).items()
                   if symbolic.covers(fill_prefix.FillSpec(**e["constexprs"]))]
        assert covered and len(covered) == (1 if compiled else len(covered))
        assert row(less)["proved"] == row(full)["proved"] - len(covered)
        assert set(covered) <= set(row(less)["unproved"])


def test_sglang_envelope_names_what_sglang_launches():
    """sglang's kv launch at K = 4, D = 3, 3 requests: lane bounds 4, 4, 16, NUM_STEPS 0 or 3;
    a manifest without one proved sglang specialization covers one fewer."""
    from specbound import manifest as manifest_mod
    from specbound.engines.sglang import envelope

    labels = envelope.kv_labels(((4, 3, 16),))
    assert "NUM_STEPS=3,page>1,bs_upper=4,iter_upper=4,num_tokens_upper=16,seq_lens=int64" in labels
    assert "NUM_STEPS=0,page=1,bs_upper=4,iter_upper=4,num_tokens_upper=16,seq_lens=int64" in labels
    assert not any("iter_upper=8" in label for label in labels)
    assert envelope.tree_in_envelope("K=1,D=3,n=4,mode=QLEN,batch_size=4")
    assert not envelope.tree_in_envelope("K=1,D=3,n=4,mode=QLEN,batch_size=257")
    assert not envelope.tree_in_envelope("K=1,D=3,n=9,mode=QLEN,batch_size=4")   # n - 1 > K + (D-1)K^2
    assert envelope.tree_batches("K=1,D=3,n=4,mode=QLEN,batch_size=1..256") == 256
    assert envelope.tree_batches("K=1,D=3,n=4,mode=QLEN,batch_size=200..300") == 57   # clipped to the envelope
    assert envelope.tree_batches("K=1,D=3,n=9,mode=QLEN,batch_size=1..256") == 0
    manifest = manifest_mod.load()
    # the per-(K, D, n) proofs alone (the envelope proofs, symbolic in K, D, n, cover them all)
    manifest["sglang_theorems"] = {t: e for t, e in manifest["sglang_theorems"].items()
                                   if not e["specialization"].startswith("K=1..")}
    full = {(r["kernel"], r["scope"]): r for r in envelope.coverage(manifest)}
    tid = next(t for t, e in manifest["sglang_theorems"].items()
               if e["kernel"] == "SGLANG-TREE-QLEN" and e["specialization"].startswith("K=1,D=3,n=4,"))
    manifest["sglang_theorems"][tid] = {**manifest["sglang_theorems"][tid], "verdict": "failed"}
    less = {(r["kernel"], r["scope"]): r for r in envelope.coverage(manifest)}
    batches = envelope.tree_batches(manifest["sglang_theorems"][tid]["specialization"])
    assert batches == (256 if "batch_size=1..256" in tid else 1)   # a symbolic-batch proof: every batch
    for scope in ("envelope", "typical configurations"):
        assert less["SGLANG-TREE", scope]["proved"] == full["SGLANG-TREE", scope]["proved"] - batches
        assert less["SGLANG-DRAFT-KV", scope] == full["SGLANG-DRAFT-KV", scope]


def test_a_symbolic_kv_proof_covers_exactly_the_lane_bounds_it_names():
    """A draft kv proof with symbolic lane bounds (``bs_upper=2^0..2^8``, ...) covers every
    specialization of its NUM_STEPS and page case whose lane bounds are powers of two up to
    the envelope's largest, and nothing else; a manifest where that proof failed covers
    exactly those fewer."""
    from specbound import manifest as manifest_mod
    from specbound.engines.sglang import envelope
    from specbound.engines.sglang.draft_kv_model import KvSpec

    sym = KvSpec(3, True)
    assert KvSpec.from_label(sym.label) == sym
    assert sym.covers(KvSpec(3, True, 256, 4, 2048)) and sym.covers(KvSpec(3, True, 1, 1, 1))
    assert not sym.covers(KvSpec(3, True, 512, 4, 2048))      # above the envelope's batch
    assert not sym.covers(KvSpec(3, True, 6, 4, 16))          # not a power of two
    assert not sym.covers(KvSpec(2, True, 8, 4, 32)) and not sym.covers(KvSpec(3, False, 8, 4, 32))
    assert not KvSpec(3, True, 8, 4, 32).covers(KvSpec(3, True, 16, 4, 32))   # a concrete proof: itself only
    manifest = manifest_mod.load()
    full = {(r["kernel"], r["scope"]): r for r in envelope.coverage(manifest)}
    tid = next(t for t, e in manifest["sglang_theorems"].items()
               if e["kernel"] == "SGLANG-DRAFT-KV" and e["specialization"] == sym.label)
    manifest["sglang_theorems"][tid] = {**manifest["sglang_theorems"][tid], "verdict": "failed"}
    less = {(r["kernel"], r["scope"]): r for r in envelope.coverage(manifest)}
    covered = [sp for sp in envelope.kv_specs() if sym.covers(sp)]
    assert len(covered) > 1
    assert less["SGLANG-DRAFT-KV", "envelope"]["proved"] == full["SGLANG-DRAFT-KV", "envelope"]["proved"] - len(covered)


def test_a_symbolic_block_b_proof_covers_its_interpreted_launches(tmp_path, monkeypatch):
    """A proved specialization labelled ``BLOCK_B=2^0..2^k`` counts every interpreted launch with
    the same other constexprs and a BLOCK_B among those powers of two as proved (as
    ``FillSpec.covers`` says), and nothing else; the same for ``proved_specialization``."""
    import json

    manifest = _without_symbolic(json.loads(open(plan.manifest_path(), encoding="utf-8").read()), "fill_prefix_kernel")
    interpreted = plan.envelope_cached("fill_prefix_kernel", False)
    proved = plan.proved_in(manifest)
    target = next(e["constexprs"] for key, e in interpreted.items() if key not in proved)
    symbolic = fill_prefix.FillSpec(None, target["NODES"], target["BLOCK_C"])
    covered = {key for key, e in interpreted.items()
               if symbolic.covers(fill_prefix.FillSpec(**e["constexprs"])) and key not in proved}
    assert target["BLOCK_B"] in plan.symbolic_block_b_values() and covered
    manifest["kernel_theorems"]["KERNEL-FILL-PREFIX-IN-BOUNDS[symbolic]"] = {
        "kernel": symbolic.name, "specialization": symbolic.label, "verdict": "proved"}
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest))
    row = lambda cov: next(r for r in cov if r["kernel"] == "fill_prefix_kernel" and not r["compiled"])
    before, after = row(plan.envelope_coverage(proved)), row(plan.envelope_coverage(plan.proved_specializations(str(path))))
    assert after["proved"] == before["proved"] + len(covered)
    assert covered.isdisjoint(after["unproved"])
    monkeypatch.setattr(plan, "MANIFEST_PATH", str(path))
    assert plan.proved_specialization("fill_prefix_kernel", target)
    assert not plan.proved_specialization("fill_prefix_kernel", {**target, "BLOCK_B": 3})   # not a covered value
    wider = 2 * plan.symbolic_block_b_values()[-1]
    assert not plan.proved_specialization("fill_prefix_kernel", {**target, "BLOCK_B": wider})


def test_the_envelope_tree_proofs_count_per_property():
    """The tree proofs symbolic in K, D, n cover every launch of the envelope, in the row of fully
    proved launches only while all five of their properties are proved: a failed property of
    one takes its mode's launches out of every row that needs that property, but those a
    per-(K, D, n) proof covers."""
    from specbound import manifest as manifest_mod
    from specbound.engines.sglang import envelope

    manifest = manifest_mod.load()
    rows = {(r["kernel"], r["scope"]): r for r in envelope.coverage(manifest)}
    tree, overrun = rows["SGLANG-TREE", "envelope"], rows[envelope.OVERRUN_ROW, "envelope"]
    assert tree["proved"] == tree["total"] == overrun["proved"] == overrun["total"]
    per_spec = {e["specialization"] for e in manifest["sglang_theorems"].values()
                if e["kernel"].startswith("SGLANG-TREE-") and not e["specialization"].startswith("K=1..")}
    qlen_per_spec = envelope.tree_launches({s for s in per_spec if "mode=QLEN" in s})
    full_per_spec = envelope.tree_launches({s for s in per_spec if "mode=FULL" in s})
    walk = next(t for t, e in manifest["sglang_theorems"].items() if e["kernel"] == "SGLANG-TREE-FULL"
                and e["specialization"].startswith("K=1..") and e["property"] == "WALK-BOUNDED")
    manifest["sglang_theorems"][walk] = {**manifest["sglang_theorems"][walk], "verdict": "failed"}
    less = {(r["kernel"], r["scope"]): r for r in envelope.coverage(manifest)}
    assert less["SGLANG-TREE", "envelope"]["proved"] == tree["total"] // 2 + full_per_spec
    assert less[envelope.OVERRUN_ROW, "envelope"] == overrun   # not one of its properties
    wrap = next(t for t, e in manifest["sglang_theorems"].items() if e["kernel"] == "SGLANG-TREE-QLEN"
                and e["specialization"].startswith("K=1..") and e["property"] == "NO-WRAP")
    manifest["sglang_theorems"][wrap] = {**manifest["sglang_theorems"][wrap], "verdict": "failed"}
    fewer = {(r["kernel"], r["scope"]): r for r in envelope.coverage(manifest)}
    assert fewer["SGLANG-TREE", "envelope"]["proved"] == full_per_spec + qlen_per_spec
    assert fewer[envelope.OVERRUN_ROW, "envelope"]["proved"] == tree["total"] // 2 + qlen_per_spec
