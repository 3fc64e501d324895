"""KV-*: the draft-decode kv_indices segments tile their row and fit its width."""

from __future__ import annotations

from specbound import spec

# Each theorem's verdict and the mutants it must refute are in proofs/manifest.json
# (proofs/test_manifest.py::test_spec_theorem_as_the_manifest_expects).


def test_missing_topk_counterexample_overruns_the_row(proof_results):
    m = next(m for m in proof_results["KV-CUDA-GRAPH-COVERS"].mutants if m.id == "MUT-27338-MISSING-TOPK")
    x = m.counterexample
    used = spec.draft_kv_indices_used_len(x["S"], x["K"], x["num_seqs"] * x["K"], x["D"])
    assert used > x["max_bs"] * x["C"]
    assert used <= spec.draft_kv_indices_buffer_width(x["max_bs"], x["K"], x["C"])


def test_no_draft_room_counterexample_fails_the_check(proof_results):
    m = next(m for m in proof_results["KV-CAPACITY"].mutants if m.id == "MUT-NO-DRAFT-ROOM")
    x = m.counterexample
    assert x["seq_len[0]"] + x["D"] > x["C"]
    assert not spec.draft_kv_capacity_ok(x["seq_len[0]"], x["K"], 1, x["D"],
                                         spec.draft_kv_indices_buffer_width(1, x["K"], x["C"]))


def test_background_numbers():
    assert spec.draft_kv_indices_used_len(100, 2, 8, 3) == 224
    assert spec.draft_kv_indices_buffer_width(4, 3, 256) == 3072
