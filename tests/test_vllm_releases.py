"""Older vLLM signatures (releases.py), launching only some programs of a grid (subgrid), and
the stored-index property of the EAGLE input kernel, on small kernels of our own.  The real
releases only when asked: ``SPECBOUND_VLLM_RELEASES`` names cached (or fetchable) versions."""

from __future__ import annotations

import os

import pytest

from specbound.engines.vllm import audit, contract, locate, matrix, prove, releases
from specbound.engines.vllm import replay as replays

EAGLE = '''
import triton
import triton.language as tl


@triton.jit
def eagle_prepare_inputs_padded_kernel(cu_num_draft_tokens_ptr, valid_sampled_tokens_count_ptr,
                                       query_start_loc_gpu_ptr, token_indices_to_sample_ptr,
                                       num_rejected_tokens_gpu_ptr, num_reqs):
    req = tl.program_id(0)
    if req >= num_reqs:
        return
    first = 0 if req == 0 else tl.load(cu_num_draft_tokens_ptr + req - 1)
    drafts = tl.load(cu_num_draft_tokens_ptr + req) - first
    valid = tl.load(valid_sampled_tokens_count_ptr + req)
    rejected = tl.where(drafts > 0, drafts + 1 - valid, 0)
    rejected = tl.minimum(rejected, drafts)
    last = tl.load(query_start_loc_gpu_ptr + req + 1) - 1
    tl.store(token_indices_to_sample_ptr + req, last - rejected)
    tl.store(num_rejected_tokens_gpu_ptr + req, rejected)
'''
# vLLM's form: a discarded request (count 0) with draft tokens rejects one token more than it has
UNCLAMPED = ("    rejected = tl.minimum(rejected, drafts)\n", "")

PIDS = '''
import triton
import triton.language as tl


@triton.jit
def pids_kernel(out_ptr):
    a = tl.program_id(0)
    b = tl.program_id(1)
    cell = a * tl.num_programs(1) + b
    tl.store(out_ptr + 2 * cell, a * 100 + b)
    tl.store(out_ptr + 2 * cell + 1, tl.num_programs(0) * 100 + tl.num_programs(1))
'''


def _tree(tmp_path, text):
    root = tmp_path / "vllm"
    (root / "v1" / "spec_decode").mkdir(parents=True)
    (root / "v1" / "sample").mkdir(parents=True)
    (root / "v1" / "sample" / "rejection_sampler.py").write_text("")
    (root / "v1" / "spec_decode" / "utils.py").write_text(text)
    return root


def _index_verdict(root):
    k = contract.BY_NAME["eagle_prepare_inputs_padded_kernel"]
    return next(r.status for r in prove.prove_kernel(root, k) if "-INDEX-IN-RANGE[" in r.id)


def test_a_clamped_index_proves_and_vllms_form_is_refuted_and_replayed(tmp_path):
    good = _tree(tmp_path / "good", EAGLE)
    bad = _tree(tmp_path / "bad", EAGLE.replace(*UNCLAMPED))
    assert _index_verdict(good) == "proved"
    assert _index_verdict(bad) == "failed"
    k = contract.BY_NAME["eagle_prepare_inputs_padded_kernel"]
    assert replays.prepare_inputs_padded(good, k, k.specializations[0]).verdict == "none"
    rep = replays.prepare_inputs_padded(bad, k, k.specializations[0])
    assert rep.verdict == "output" and "= -1" in rep.detail, rep.detail
    row = next(r for r in audit.run_audit(bad, kernels=[k.name]).rows if "INDEX-IN-RANGE" in r.id)
    assert row.status == "refuted" and "request >= 1: proved" in row.detail, row.detail


def test_only_programs_runs_the_chosen_programs_seeing_the_whole_grid(tmp_path):
    import torch

    from specbound.replay import load_kernel
    from specbound.replay.subgrid import only_programs

    path = tmp_path / "pids.py"
    path.write_text(PIDS)
    k = load_kernel(str(path), "pids_kernel")
    out = torch.full((2 * 12,), -1, dtype=torch.int32)
    with only_programs((4, 3), [(2, 1), (3, 2)]) as small:
        k[small](out)
    cells = {i: (int(out[2 * i]), int(out[2 * i + 1])) for i in range(12) if int(out[2 * i]) >= 0}
    assert cells == {7: (201, 403), 11: (302, 403)}, cells
    with pytest.raises(ValueError, match="outside the grid"):
        with only_programs((4, 3), [(4, 0)]):
            pass


def test_an_older_signature_is_audited_as_named_or_refused_naming_the_difference():
    k = contract.BY_NAME["rejection_random_sample_kernel"]
    params = sorted(contract.table_params(k) - set(releases.SYNTHETIC))
    src = f"def rejection_random_sample_kernel({', '.join(params)}):\n    pass\n"
    derived, v = releases.adapt(k, src)
    assert v.releases == "0.8.5 .. 0.19.1"
    assert [s[0] for s in derived.specializations] == ["draft_probs", "no_draft_probs"]
    assert "synthetic_conditional_rates_ptr" not in {b.arg for b in derived.buffers}
    ngram = src.replace("NO_DRAFT_PROBS", "IS_NGRAM")
    derived, v = releases.adapt(k, ngram)
    assert v.releases == "0.8.3 .. 0.8.4" and all("IS_NGRAM" in s[1] for s in derived.specializations)
    with pytest.raises(ValueError, match=r"parameters in the source \['extra_ptr'\]"):
        releases.adapt(k, src.replace("vocab_size", "vocab_size, extra_ptr"))
    r = contract.BY_NAME["sample_recovered_tokens_kernel"]
    old = sorted((contract.table_params(r) - {"inv_q_ptr", "BLOCK_SIZE", "USE_FP64_GUMBEL"}) | {"q_ptr", "PADDED_VOCAB_SIZE"})
    old_src = f"def sample_recovered_tokens_kernel({', '.join(old)}):\n    pass\n"
    derived, v = releases.adapt(r, old_src)
    assert v.releases == "0.8.5 .. 0.16.0" and "q_ptr" in {b.arg for b in derived.buffers}
    assert {s[1]["PADDED_VOCAB_SIZE"] for s in derived.specializations} == {releases.PADDED_LANES}
    contract.check_signature(derived, old_src)


def test_a_named_but_unmodelled_signature_is_refused_by_name(monkeypatch):
    k = contract.BY_NAME["expand_kernel"]
    params = sorted(contract.table_params(k) - {"replace_to"})
    monkeypatch.setattr(releases, "VARIANTS", (releases.Variant("expand_kernel", "0.1 .. 0.2", ("replace_to",),
                                                                modelled=False, note="why not"),))
    with pytest.raises(releases.UnmodelledSignature, match=r"0.1 .. 0.2 \(without replace_to\) is not modelled: why not"):
        releases.adapt(k, f"def expand_kernel({', '.join(params)}):\n    pass\n")


def test_a_dropped_constexpr_is_a_difference_not_silence():
    k = contract.BY_NAME["sample_recovered_tokens_kernel"]
    params = sorted(contract.table_params(k) - {"USE_FP64_GUMBEL"})
    with pytest.raises(ValueError, match=r"USE_FP64_GUMBEL"):
        contract.check_signature(k, f"def sample_recovered_tokens_kernel({', '.join(params)}):\n    pass\n")


def test_releases_with_the_same_kernels_share_one_audit(tmp_path, monkeypatch):
    monkeypatch.setattr(contract, "KERNELS", (contract.BY_NAME["eagle_prepare_inputs_padded_kernel"],))
    good, bad = _tree(tmp_path / "a", EAGLE), _tree(tmp_path / "b", EAGLE.replace(*UNCLAMPED))
    (tmp_path / "c").mkdir()
    same_as_a = _tree(tmp_path / "c" / "x", "# a comment the digest ignores\n" + EAGLE)
    seconds, same = {}, {}
    table = matrix.matrix({"1": good, "2": bad, "3": same_as_a}, seconds, same)
    assert same == {"3": "1"} and set(seconds) == {"1", "2"}
    row = next(v for t, v in table.items() if "INDEX-IN-RANGE" in t)
    assert row == {"1": "proved", "2": "refuted", "3": "proved"}, row


RELEASES = os.environ.get("SPECBOUND_VLLM_RELEASES", "").split()


@pytest.mark.skipif(not RELEASES, reason="opt-in: set SPECBOUND_VLLM_RELEASES to vLLM versions (cached or fetched)")
def test_the_release_matrix_on_real_releases():
    """Each named release: the int32 token-row products of the random sampler and the
    recovered-token kernel refuted and replayed (both exist since 0.8.3)."""
    for v in RELEASES:
        rep = audit.run_audit(locate.fetch(v), kernels=["rejection_random_sample_kernel", "sample_recovered_tokens_kernel"])
        status = {r.id: r.status for r in rep.rows}
        assert status["vllm.KERNEL-VLLM-rejection_random_sample_kernel-NO-WRAP[no_draft_probs]"] == "refuted", (v, status)
        assert status["vllm.KERNEL-VLLM-sample_recovered_tokens_kernel-NO-WRAP[no_draft_probs]"] == "refuted", (v, status)


def _real_tree():
    try:
        return locate.locate()
    except locate.NotFound:
        return None


@pytest.mark.skipif(_real_tree() is None, reason=f"opt-in: set ${locate.ENV} to a vLLM tree (or fill the cache)")
def test_the_real_recovered_token_wrap_and_stored_index_replay():
    """vLLM's own recovered-token kernel wraps at 8,390 draft tokens (the token product) and
    8,390 requests (the request product), replayed on the wrapping request's programs; the
    EAGLE input kernel stores -1 for a discarded request 0 with draft tokens."""
    rep = audit.run_audit(_real_tree(), kernels=["sample_recovered_tokens_kernel", "eagle_prepare_inputs_padded_kernel"])
    status = {r.id: r.status for r in rep.rows}
    assert status["vllm.KERNEL-VLLM-sample_recovered_tokens_kernel-NO-WRAP[no_draft_probs]"] == "refuted", status
    assert status["vllm.KERNEL-VLLM-eagle_prepare_inputs_padded_kernel-INDEX-IN-RANGE[plain]"] == "refuted", status
    rec = [f for f in rep.findings if f.kernel == "sample_recovered_tokens_kernel"]
    assert all(f.verdict == "wrap" for f in rec) and {len(f.counts) for f in rec} == {67, 8390}, rec


def test_fetch_keeps_the_python_files_and_deletes_the_wheel(tmp_path, monkeypatch):
    import subprocess
    import tempfile
    import zipfile

    made = []

    def fake_pip(cmd, check):
        dest = cmd[cmd.index("-d") + 1]
        made.append(dest)
        with zipfile.ZipFile(f"{dest}/vllm-9.9.9-cp38-abi3-manylinux_2_28_x86_64.whl", "w") as z:
            z.writestr("vllm/v1/sample/rejection_sampler.py", "# kernels\n")
            z.writestr("vllm/_C.abi3.so", b"\0")

    monkeypatch.setattr(subprocess, "run", fake_pip)
    monkeypatch.setattr(locate, "cache_dir", lambda v: tmp_path / "cache" / v)
    def fake_mkdtemp(prefix):
        (tmp_path / "dl").mkdir()
        return str(tmp_path / "dl")

    monkeypatch.setattr(tempfile, "mkdtemp", fake_mkdtemp)
    root = locate.fetch("9.9.9")
    assert (root / "v1" / "sample" / "rejection_sampler.py").is_file() and not (root / "_C.abi3.so").exists()
    assert made and not os.path.exists(made[0]), "the downloaded wheel is deleted once unpacked"
