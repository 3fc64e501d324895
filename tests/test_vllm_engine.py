"""The vLLM engine on small vLLM-shaped kernels of our own (below):
the correct forms prove, each planted bug turns its property red; the contract table
matches the kernels' signatures; the audit's exit codes.  The real release is tested only
when asked (``SPECBOUND_VLLM_PATH`` set, or the cache filled): no 336 MB download here."""

from __future__ import annotations

import os
import pathlib

import pytest

from specbound.engines.vllm import audit, contract, locate, prove

# Small kernels shaped like vLLM's (same names and parameters, so the contract table applies),
# written for these tests: the correct forms, and the planted bugs the proofs must catch.
GOOD = '''
import triton
import triton.language as tl


@triton.jit
def rejection_random_sample_kernel(output_token_ids_ptr, cu_num_draft_tokens_ptr, draft_token_ids_ptr,
                                   draft_probs_ptr, target_probs_ptr, bonus_token_ids_ptr, recovered_token_ids_ptr,
                                   uniform_probs_ptr, is_greedy_ptr, max_spec_len, vocab_size,
                                   synthetic_conditional_rates_ptr, NO_DRAFT_PROBS: tl.constexpr,
                                   SYNTHETIC_MODE: tl.constexpr):
    req = tl.program_id(0)
    if tl.load(is_greedy_ptr + req):
        return
    first = 0 if req == 0 else tl.load(cu_num_draft_tokens_ptr + req - 1)
    last = tl.load(cu_num_draft_tokens_ptr + req)
    rejected = False
    for k in range(last - first):
        if not rejected:
            tok = tl.load(draft_token_ids_ptr + first + k)
            u = tl.load(uniform_probs_ptr + first + k)
            ok = False
            if tok >= 0:
                row = (first + k).to(tl.int64) * vocab_size
                p = tl.load(target_probs_ptr + row + tok)
                q = 1.0 if NO_DRAFT_PROBS else tl.load(draft_probs_ptr + row + tok)
                ok = p >= u * q
            if not ok:
                rejected = True
                tok = tl.load(recovered_token_ids_ptr + first + k)
            tl.store(output_token_ids_ptr + req * (max_spec_len + 1) + k, tok)
    if not rejected:
        tl.store(output_token_ids_ptr + req * (max_spec_len + 1) + last - first, tl.load(bonus_token_ids_ptr + req))


@triton.jit
def expand_kernel(output_ptr, input_ptr, cu_num_tokens_ptr, replace_from, replace_to, MAX_NUM_TOKENS: tl.constexpr):
    req = tl.program_id(0)
    first = 0 if req == 0 else tl.load(cu_num_tokens_ptr + req - 1)
    count = tl.load(cu_num_tokens_ptr + req) - first
    value = tl.load(input_ptr + req)
    value = tl.where(value == replace_from, replace_to, value)
    lanes = tl.arange(0, MAX_NUM_TOKENS)
    tl.store(output_ptr + first + lanes, value, mask=lanes < count)


@triton.jit
def sample_recovered_tokens_kernel(output_token_ids_ptr, cu_num_draft_tokens_ptr, draft_token_ids_ptr,
                                   draft_probs_ptr, target_probs_ptr, inv_q_ptr, vocab_size,
                                   BLOCK_SIZE: tl.constexpr, NO_DRAFT_PROBS: tl.constexpr,
                                   USE_FP64_GUMBEL: tl.constexpr):
    req = tl.program_id(0)
    first = 0 if req == 0 else tl.load(cu_num_draft_tokens_ptr + req - 1)
    pos = tl.program_id(1)
    if pos >= tl.load(cu_num_draft_tokens_ptr + req) - first:
        return
    tok = first + pos
    max_val = tl.full((), float("-inf"), tl.float32)
    recovered_id = 0
    for v in range(0, vocab_size, BLOCK_SIZE):
        cols = v + tl.arange(0, BLOCK_SIZE)
        inside = cols < vocab_size
        prob = tl.load(target_probs_ptr + tok.to(tl.int64) * vocab_size + cols, mask=inside, other=0.0)
        noise = tl.load(inv_q_ptr + req.to(tl.int64) * vocab_size + cols, mask=inside, other=0.0)
        score = tl.where(inside, prob * noise, float("-inf"))
        top, at = tl.max(score, axis=0, return_indices=True)
        if top > max_val:
            max_val = top
            recovered_id = v + at
    tl.store(output_token_ids_ptr + tok, tl.minimum(recovered_id, vocab_size - 1))
'''

# (name, kernel, what is planted, the text replaced, its replacement, the property that must fail)
PLANTS = (
    ("int32-product", "rejection_random_sample_kernel", "the token row offset computed in int32",
     "row = (first + k).to(tl.int64) * vocab_size", "row = (first + k) * vocab_size", "NO-WRAP"),
    ("unmasked-row", "expand_kernel", "the segment store without its mask",
     "tl.store(output_ptr + first + lanes, value, mask=lanes < count)", "tl.store(output_ptr + first + lanes, value)",
     "IN-BOUNDS"),
    ("off-by-one-stride", "rejection_random_sample_kernel", "output rows max_spec_len wide, not max_spec_len + 1",
     "tl.store(output_token_ids_ptr + req * (max_spec_len + 1) + k, tok)",
     "tl.store(output_token_ids_ptr + req * max_spec_len + k, tok)", "RACE-FREE"),
    ("int32-product-recovered", "sample_recovered_tokens_kernel", "the token row offset computed in int32",
     "tok.to(tl.int64) * vocab_size", "tok * vocab_size", "NO-WRAP"),
    ("store-past-token", "sample_recovered_tokens_kernel", "the recovered token stored one cell late",
     "tl.store(output_token_ids_ptr + tok,", "tl.store(output_token_ids_ptr + tok + 1,", "IN-BOUNDS"),
)


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """A fake vLLM package: the good kernels at the rejection sampler's path."""
    root = tmp_path_factory.mktemp("vllm") / "vllm"
    (root / "v1" / "sample").mkdir(parents=True)
    (root / "v1" / "sample" / "rejection_sampler.py").write_text(GOOD)
    return root


def _verdicts(root, name, path=None, specs=1):
    k = contract.BY_NAME[name]
    k = type(k)(**{**k.__dict__, "specializations": k.specializations[-specs:]})
    return {prop: r.status for r in prove.prove_kernel(root, k, path) for prop in k.properties if f"-{prop}[" in r.id}


@pytest.mark.parametrize("name", ["rejection_random_sample_kernel", "expand_kernel", "sample_recovered_tokens_kernel"])
def test_the_correct_kernels_prove(tree, name):
    got = _verdicts(tree, name)
    assert got and all(s == "proved" for s in got.values()), got


@pytest.mark.parametrize("plant", PLANTS, ids=[p[0] for p in PLANTS])
def test_each_planted_bug_turns_its_property_red(tree, tmp_path, plant):
    _id, name, _what, old, new, prop = plant
    assert GOOD.count(old) == 1
    path = tmp_path / "planted.py"
    path.write_text(GOOD.replace(old, new))
    got = _verdicts(tree, name, str(path))
    assert got[prop] != "proved", got


def test_the_contract_table_names_every_parameter(tree):
    for name in ("rejection_random_sample_kernel", "expand_kernel", "sample_recovered_tokens_kernel"):
        contract.check_signature(contract.BY_NAME[name], GOOD)
    with pytest.raises(ValueError, match="not in the contract table"):
        contract.check_signature(contract.BY_NAME["expand_kernel"],
                                 GOOD.replace("replace_to, MAX_NUM_TOKENS", "replace_to, extra, MAX_NUM_TOKENS"))


def test_locate_names_the_argument(tmp_path, monkeypatch):
    monkeypatch.delenv(locate.ENV, raising=False)
    with pytest.raises(locate.NotFound, match="--vllm-path"):
        locate.locate(tmp_path)


def test_audit_exit_codes(tree, tmp_path, monkeypatch):
    monkeypatch.delenv(locate.ENV, raising=False)
    rep = audit.run_audit(tmp_path / "nowhere")
    assert rep.exit_code() == 3 and rep.fatal
    rep = audit.run_audit(tree.parent, kernels=["expand_kernel"])
    assert rep.exit_code() == 0 and rep.rows and all(r.status == "proved" for r in rep.rows)
    bad = tmp_path / "bad" / "vllm" / "v1" / "sample"
    bad.mkdir(parents=True)
    (bad / "rejection_sampler.py").write_text(GOOD.replace(PLANTS[1][3], PLANTS[1][4]))
    rep = audit.run_audit(bad.parent.parent, kernels=["expand_kernel"])
    assert rep.exit_code() == 1


def _real_tree():
    path = os.environ.get(locate.ENV)
    if path:
        return locate.package_root(path)
    cached = locate.cache_dir(locate.DEFAULT_VERSION)
    return locate.package_root(cached) if cached.is_dir() else None


@pytest.mark.skipif(_real_tree() is None, reason=f"opt-in: set ${locate.ENV} to a vLLM tree (or fill the cache)")
def test_the_real_release():
    """vLLM 0.33.0: greedy, expand and the random sampler's other properties proved; the
    random sampler's int32 token row product refuted and replayed on vLLM's own kernel."""
    rep = audit.run_audit(_real_tree(), kernels=["rejection_greedy_sample_kernel", "expand_kernel",
                                                 "rejection_random_sample_kernel"])
    status = {r.id: r.status for r in rep.rows}
    assert all(s == "proved" for i, s in status.items() if "random" not in i or "NO-WRAP" not in i), status
    assert status["vllm.KERNEL-VLLM-rejection_random_sample_kernel-NO-WRAP[no_draft_probs]"] == "refuted"
    f = next(f for f in rep.findings if f.specialization == "no_draft_probs")
    assert f.min_num_tokens == 8390 and f.verdict == "wrap"


# Planted in a copy of vLLM's own kernels (opt-in: the real tree): (kernel, file, text, replacement, property)
REAL_PLANTS = (
    ("rejection_greedy_sample_kernel", "v1/sample/rejection_sampler.py", "req_idx * (max_spec_len + 1) + pos,\n",
     "req_idx * max_spec_len + pos,\n", "RACE-FREE"),
    ("rejection_random_sample_kernel", "v1/sample/rejection_sampler.py", "(max_spec_len + 1) + pos, token_id",
     "(max_spec_len + 1) + pos + 2, token_id", "IN-BOUNDS"),
    ("expand_kernel", "v1/sample/rejection_sampler.py", "src_val, mask=offset < num_tokens)", "src_val)", "IN-BOUNDS"),
    ("sample_recovered_tokens_kernel", "v1/sample/rejection_sampler.py", "if pos >= num_draft_tokens:",
     "if pos > num_draft_tokens:", "IN-BOUNDS"),
    ("eagle_prepare_inputs_padded_kernel", "v1/spec_decode/utils.py", "query_start_loc_gpu_ptr + req_idx + 1)",
     "query_start_loc_gpu_ptr + req_idx + 2)", "IN-BOUNDS"),
    ("eagle_step_slot_mapping_metadata_kernel", "v1/spec_decode/utils.py",
     "req_idx * block_table_stride + block_number)", "req_idx * block_table_stride + block_number + 1)", "IN-BOUNDS"),
    ("eagle_prepare_next_token_padded_kernel", "v1/spec_decode/utils.py",
     "token_mask = token_offs < num_sampled_tokens_per_req", "token_mask = token_offs <= num_sampled_tokens_per_req",
     "IN-BOUNDS"),
    ("copy_and_expand_eagle_inputs_kernel", "v1/spec_decode/utils.py",
     "tl.store(out_input_ids_ptr + out_idx, token_ids, mask=in_bounds)", "tl.store(out_input_ids_ptr + out_idx, token_ids)",
     "IN-BOUNDS"),
)


@pytest.mark.skipif(_real_tree() is None, reason=f"opt-in: set ${locate.ENV} to a vLLM tree (or fill the cache)")
@pytest.mark.parametrize("plant", REAL_PLANTS, ids=[p[0] for p in REAL_PLANTS])
def test_a_bug_planted_in_a_copy_of_each_real_kernel_turns_red(tmp_path, plant):
    name, rel, old, new, prop = plant
    root = _real_tree()
    text = (root / rel).read_text()
    assert text.count(old) == 1, old
    path = tmp_path / pathlib.Path(rel).name
    path.write_text(text.replace(old, new))
    assert _verdicts(root, name)[prop] == "proved"
    assert _verdicts(root, name, str(path))[prop] != "proved"


def test_unpack_takes_only_the_packages_python_files(tmp_path):
    import zipfile

    wheel = tmp_path / "vllm-0.0.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("vllm/v1/sample/rejection_sampler.py", GOOD)
        z.writestr("vllm/_C.abi3.so", b"\0")
        z.writestr("vllm-0.0.0.dist-info/METADATA", "Name: vllm")
    root = locate.unpack_py(str(wheel), tmp_path / "out")
    files = sorted(p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert root.name == "vllm" and files == ["vllm/v1/sample/rejection_sampler.py"]


def test_the_cli_runs_audit_vllm(tree, tmp_path, capsys, monkeypatch):
    from specbound.cli import main

    monkeypatch.delenv(locate.ENV, raising=False)
    monkeypatch.setattr(contract, "KERNELS", (contract.BY_NAME["expand_kernel"],))
    out = tmp_path / "r.json"
    assert main(["audit", "vllm", "--vllm-path", str(tree.parent), "--json", str(out)]) == 0
    import json

    report = json.loads(out.read_text())
    assert report["summary"]["exit"] == 0 and report["rows"] and report["contract"]
    assert main(["audit", "vllm", "--vllm-path", str(tmp_path / "missing")]) == 3


def test_the_release_matrix_reports_since_and_until(tree, tmp_path, monkeypatch):
    from specbound.engines.vllm import matrix

    monkeypatch.setattr(contract, "KERNELS", (contract.BY_NAME["expand_kernel"],))
    bad = tmp_path / "bad" / "vllm" / "v1" / "sample"
    bad.mkdir(parents=True)
    (bad / "rejection_sampler.py").write_text(GOOD.replace(PLANTS[1][3], PLANTS[1][4]))
    table = matrix.matrix({"1.0": tree.parent, "1.1": bad.parent.parent, "1.2": tree.parent})
    spans = matrix.spans(table, ["1.0", "1.1", "1.2"])
    row = next(v for k, v in spans.items() if "IN-BOUNDS[int32]" in k)
    assert row == {"proved": [("1.0", "1.0"), ("1.2", "1.2")], "holds only if": [("1.1", "1.1")]}, row


def test_the_sarif_log_puts_each_finding_on_its_kernel(tree, tmp_path, monkeypatch):
    """``audit vllm --sarif``: one error result per finding, on the ``def`` line of the kernel
    in its file under VLLM_ROOT, valid against the SARIF 2.1.0 objects the audit writes (the
    schema the sglang audit's SARIF is checked with); a clean tree gives no result."""
    import json

    import jsonschema

    from specbound.cli import main

    schema = json.loads((pathlib.Path(__file__).parent / "data" / "sarif-2.1.0-subset.schema.json").read_text())
    monkeypatch.delenv(locate.ENV, raising=False)
    monkeypatch.setattr(contract, "KERNELS", (contract.BY_NAME["expand_kernel"],))
    bad = tmp_path / "bad" / "vllm" / "v1" / "sample"
    bad.mkdir(parents=True)
    planted = GOOD.replace(PLANTS[1][3], PLANTS[1][4])
    (bad / "rejection_sampler.py").write_text(planted)
    for root, expect_findings in ((tree.parent, False), (bad.parent.parent, True)):
        out = tmp_path / f"{expect_findings}.sarif"
        rc = main(["audit", "vllm", "--vllm-path", str(root), "--sarif", str(out), "--no-replay"])
        log = json.loads(out.read_text())
        jsonschema.Draft7Validator(schema).validate(log)
        results = log["runs"][0]["results"]
        rows = audit.run_audit(root, replay=False).rows
        findings = [r.id for r in rows if r.status in audit.FAILING]
        assert (rc == 1) == expect_findings == bool(findings)
        assert sorted(r["properties"]["row"] for r in results) == sorted(findings)
        assert all(r["level"] == "error" for r in results)
        def_line = 1 + next(i for i, line in enumerate(planted.splitlines()) if line.startswith("def expand_kernel"))
        for r in results:
            where = r["locations"][0]["physicalLocation"]
            assert where["artifactLocation"] == {"uri": "v1/sample/rejection_sampler.py", "uriBaseId": "VLLM_ROOT"}
            assert where["region"]["startLine"] == def_line
