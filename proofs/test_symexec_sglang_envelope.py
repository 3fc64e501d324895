"""sglang's Triton tree build proved for the whole serving envelope at once (K, D, n Z3 terms,
its loops summarised by checked invariants: :mod:`specbound.engines.sglang.tree_symbolic`):
all five properties (IN-BOUNDS, NO-WRAP, RACE-FREE, FOOTPRINT, WALK-BOUNDED) proved and witnessed
per mask mode, and each shown to fail on bugs
planted in a copy of sglang's kernel source (the counterexample's shape then refuted as a
concrete specialization and replayed on the edited kernel under the checked interpreter)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from specbound.audit.extract import SourceIndex
from specbound.audit.report import AuditReport
from specbound.engines.sglang import kernel_proofs, tree_model, tree_symbolic
from specbound.engines.sglang.testing import planted_copy

pytest.importorskip("specbound.kernels")  # before triton: it sets TRITON_INTERPRET
pytest.importorskip("torch")


@pytest.fixture(scope="module")
def tree_path(sglang_root):
    path = sglang_root / tree_model.SOURCE
    if not path.is_file():
        pytest.skip(f"this sglang keeps {tree_model.KERNEL} elsewhere")
    return str(path)


@pytest.mark.parametrize("mode", sorted(tree_model.MODE_NAMES), ids=tree_model.MODE_NAMES.get)
def test_properties_proved_for_the_envelope(tree_path, mode):
    """Every property of the per-(K, D, n) proofs proved with a closed witness, resting on the
    envelope's ranges, the tree shape and the checked loop invariants (cited), not on anything
    unproved."""
    results = tree_symbolic.prove(tree_symbolic.EnvelopeSpec(mode), tree_path)
    assert [r.id.split("[")[0] for r in results] == [f"KERNEL-SGLANG-TREE-{tree_model.MODE_NAMES[mode]}-{p}"
                                                     for p in tree_symbolic.PROPERTIES]
    for r in results:
        assert r.status == "proved", r.detail
        assert "K=1..8,D=1..8,n=1..64" in r.id
        assert r.witness["witnessed"] == r.witness["obligations"] > 0 and r.witness["dead"] == 0
        assert {"topk", "depth", "n"} <= set(r.witness)   # the closed witness names its tree shape
        assert any(c.startswith("loop-invariant-step@") for c in r.lemmas_cited)
    assert tree_symbolic.PROPERTIES == tree_model.PROPERTIES
    in_bounds = results[0]
    assert {"draft_tokens_fit_scores", "well_formed_tree", "draft_token_num_in_envelope"} <= set(
        in_bounds.preconditions)
    assert "well_formed_tree" in in_bounds.hypotheses_used   # the unguarded parent_list read rests on it


def _planted(tmp_path, path, old, new):
    return planted_copy(path, old, new, tmp_path / "spec_tree.py")


# (old, new, mode, property, the replay's verdicts, what its detail names)
OOB = ("oob",)
PLANTS = {
    "parent search past the row": ("for pp in range(draft_token_num - 1):", "for pp in range(draft_token_num):",
                                   1, "IN-BOUNDS", OOB, "selected_index"),
    "walk search past the row": ("for cp in range(draft_token_num - 1):", "for cp in range(draft_token_num):",
                                 0, "IN-BOUNDS", OOB, "selected_index"),
    "mask row tail one late": ("tl.store(tree_mask_ptr + token_tree_idx + i, 0)",
                               "tl.store(tree_mask_ptr + token_tree_idx + i + 1, 0)", 1, "IN-BOUNDS", OOB, "tree_mask"),
    "FULL rows one late": ("seq_tree_idx + (seq_len + draft_token_num) * draft_tokenx + seq_len + 1",
                           "seq_tree_idx + (seq_len + draft_token_num) * draft_tokenx + seq_len + 2",
                           0, "IN-BOUNDS", OOB, "tree_mask"),
    "reverse loop from n": ("for i in range(draft_token_num - 1, 0, -1):", "for i in range(draft_token_num, 0, -1):",
                            0, "IN-BOUNDS", OOB, "retrive_index"),
    "walk position one past": ("cur_position = cp\n", "cur_position = cp + 1\n", 1, "IN-BOUNDS", OOB, "selected_index"),
    "parent link one past": ("parent_position = pp + 1\n", "parent_position = pp + 2\n", 1, "IN-BOUNDS", OOB,
                             "retrive_next_token"),
    # the per-(K, D, n) theorems' race and walk edits (test_symexec_sglang_mutants)
    "FULL request base b*n": ("tl.cast(draft_token_num * draft_token_num * batch_idx, seq_len.dtype)",
                              "tl.cast(draft_token_num * batch_idx, seq_len.dtype)", 0, "RACE-FREE",
                              ("race", "output"), "tree_mask"),
    "QLEN request base b*n*(n-1)": ("draft_token_num * draft_token_num * batch_idx\n                + draft_token_num",
                                    "draft_token_num * (draft_token_num - 1) * batch_idx\n                + draft_token_num",
                                    1, "RACE-FREE", ("race", "output"), "tree_mask"),
    "walk of depth + 1 steps": ("for _ in range(depth):", "for _ in range(depth + 1):", 0, "WALK-BOUNDED",
                                ("output",), "positions"),
    "positions one past": ("position + seq_len,\n", "position + seq_len + 1,\n", 1, "WALK-BOUNDED",
                           ("output",), "positions"),
    # FOOTPRINT: a wrong value (every store in bounds and its own), and a column never written
    # (only the coverage obligation sees it)
    "retrive_index of the neighbour": ("current_token_idx = retrieve_index_offset + i\n",
                                       "current_token_idx = retrieve_index_offset + i - 1\n", 0, "FOOTPRINT",
                                       ("output",), "retrive_index"),
    "row tail one column short": ("for i in range(draft_token_num - 1):\n            tl.store(tree_mask_ptr",
                                  "for i in range(draft_token_num - 2):\n            tl.store(tree_mask_ptr",
                                  1, "FOOTPRINT", ("output",), "tree_mask"),
}


@pytest.mark.parametrize("name", sorted(PLANTS))
def test_planted_edit_refutes_the_envelope_proof(tree_path, tmp_path, name):
    old, new, mode, prop, verdicts, named = PLANTS[name]
    copy = _planted(tmp_path, tree_path, old, new)
    found = tree_symbolic.refute(tree_symbolic.EnvelopeSpec(mode), copy, props=(prop,))
    assert found is not None, f"{name}: the envelope proof still holds"
    ob_id, values, ref = found
    assert values["n"] <= tree_symbolic.REPLAY_BOX["n"]
    assert ref.status == "refuted" and ref.verdict in verdicts and named in ref.detail, (ob_id, values, ref.detail)


def test_planted_wrap_refutes_the_envelope_proof(tree_path, tmp_path):
    """The prefix sum read as int32: the FULL_MASK request base P[b] * n wraps (a mask of 2^31
    cells: the solver's counterexample, too large to replay)."""
    copy = _planted(tmp_path, tree_path, "seq_len_prefix_sum = tl.load(seq_len_prefix_sum_ptr + batch_idx)",
                    "seq_len_prefix_sum = tl.load(seq_len_prefix_sum_ptr + batch_idx).to(tl.int32)")
    found = tree_symbolic.refute(tree_symbolic.EnvelopeSpec(0), copy, props=("NO-WRAP",), replay=False)
    assert found is not None and found[0].startswith(("wrap@", "cast@")), found


def test_the_unedited_kernel_has_no_counterexample(tree_path):
    """The refutation above is about the edit: the same search on sglang's own kernel finds none."""
    assert tree_symbolic.refute(tree_symbolic.EnvelopeSpec(1), tree_path, replay=False) is None


def test_the_audit_symbolic_all_proves_the_envelope_first(sglang_root, monkeypatch):
    """``audit --symbolic-all``'s tree row proves both envelope specs (one per mask mode) before
    the unrolled per-(K, D, n) ones and names them; a failed envelope proof whose shape no
    replay reproduces makes the row an error, never ``proved``.  The proofs are stand-ins here
    (the real ones are the tests above)."""
    asked = []

    def fake(ok):
        def prove(sp, path, *a, **k):
            asked.append(sp)
            good = ok or not isinstance(sp, tree_symbolic.EnvelopeSpec)
            return [SimpleNamespace(ok=good, status="proved" if good else "failed", id=f"{sp.name}-X[{sp.label}]",
                                    detail="stand-in", preconditions=[], hypotheses_used=[], axioms_used=[])]
        return prove

    def run(ok):
        asked.clear()
        monkeypatch.setattr(tree_symbolic, "prove", fake(ok))
        monkeypatch.setattr(tree_model, "prove", fake(True))
        monkeypatch.setattr(tree_model, "refute_malformed", lambda sp, path: SimpleNamespace(status="survived",
                                                                                               detail="stand-in"))
        monkeypatch.setattr(tree_symbolic, "refute", lambda sp, path: None)
        rep = AuditReport(str(sglang_root), "test", "test", engine="sglang")
        kernel_proofs.check_tree(SourceIndex(sglang_root), rep, full=True)
        (row,) = rep.rows
        return row

    row = run(True)
    assert [type(sp).__name__ for sp in asked[:2]] == ["EnvelopeSpec", "EnvelopeSpec"]
    assert len(asked) == 2 + len(kernel_proofs.tree_specs(True))
    assert row.status == "proved" and "K=1..8,D=1..8,n=1..64" in row.detail
    row = run(False)
    assert len(asked) == 1 and row.status == "error" and "no counterexample inside the replay box" in row.detail
