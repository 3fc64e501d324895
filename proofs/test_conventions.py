"""CONV-*: the sizes and element types every implementation shares, each with a mutant."""

from __future__ import annotations

from specbound import spec
from specbound.proofs import registry

# Each theorem's verdict and the mutants it must refute are in proofs/manifest.json
# (proofs/test_manifest.py::test_spec_theorem_as_the_manifest_expects).


def test_item_width_is_sglangs_packed_dtype_choice():
    """sglang: packed_dtypes[ceil(log2(ceil(n / 8)))] of (uint8, uint16, uint32)."""
    import math
    for n in range(1, spec.BITPACK_MAX_DRAFT_TOKENS + 1):
        sglang = (8, 16, 32)[int(math.ceil(math.log2((n + 7) // 8)))]
        assert spec.bitpack_item_bits(n) == sglang
        assert spec.mask_dtype_name(spec.TreeMaskMode.QLEN_ONLY_BITPACKING, n) == f"uint{sglang}"


def test_int32_kv_indices_counterexample_truncates():
    m = next(m for m in spec_results()["CONV-KV-COPY-LOSSLESS"].mutants if m.id == "MUT-KV-INT32-ALWAYS")
    x = m.counterexample
    assert x["kv_bits"] == 32 and x["r2t_bits"] == 64 and x["v"] >= 2**31


def spec_results():
    results, _ = registry.run_all(["CONV-KV-COPY-LOSSLESS"])
    return {r.id: r for r in results}
