"""Every sizing-mutant counterexample of `specbound prove`, replayed on the real kernels:
an overrun under the mutant's sizing, a clean run (== reference) under the spec's."""

from __future__ import annotations

import pytest

from specbound import kernels, manifest
from specbound.fuzz import replay

pytestmark = pytest.mark.skipif(not kernels.INTERPRETED, reason="kernels compiled: no checked interpreter")

# "THEOREM/MUTANT" -> the replay's status on the kernels (reproduced | diverged | infeasible)
EXPECTED = manifest.load()["spec_mutant_replays"]


@pytest.fixture(scope="module")
def replays():
    return {(r.theorem, r.mutant): r for r in replay.replay_all()}


def test_every_listed_mutant_has_a_counterexample_to_replay(replays):
    assert set(replays) == replay.SIZING_MUTANTS
    assert {f"{th}/{m}" for th, m in replays} == set(EXPECTED)


@pytest.mark.parametrize("key", sorted(replay.SIZING_MUTANTS))
def test_replay(replays, key):
    r = replays[key]
    assert r.ok, r.line()
    assert r.status == EXPECTED[f"{r.theorem}/{r.mutant}"], r.line()
    if r.status == "reproduced":
        assert "out-of-bounds" in r.mutant_outcome, r.line()
        assert r.spec_outcome.startswith(("clean, outputs == reference", "refused")), r.line()
    elif r.status == "infeasible":
        assert "2^31" in r.note, r.line()


def test_every_kernel_mutant_the_fuzz_replays_is_caught(replays):
    """The registry's planted kernels (the same change the kernel proofs refute) on the spec
    counterexamples: the parent search past the row reads out of bounds, the walk past D
    diverges."""
    from specbound.proofs.symexec import mutants

    for theorem, ms in mutants.fuzzed().items():
        for m in ms:
            r = replays[(theorem, m.id)]
            assert r.status in ("reproduced", "diverged") and r.mutant_sizing.startswith("planted "), r.line()
            assert m.plant.describe() in r.mutant_sizing


def test_seed_000_batch_of_48_on_a_buffer_captured_at_8():
    """The seed's own numbers, sized by the mutant's formula: an overrun; the spec falls back."""
    from specbound.fuzz.stateful import mutant_override
    from specbound.proofs.theorem import Mutant
    cx = {"bs": 48, "max_bs": 8, "n": 8, "C": 64, "b": 47, "t": 7, "j": 7, "seq_len[b]": 60, "P[b]": 47 * 60}
    m = Mutant("MUT-33127-FULL-ALWAYS-FITS", "",
               overrides={"fits": mutant_override("VM-FULL-IN-BOUNDS", "MUT-33127-FULL-ALWAYS-FITS", "fits")})
    r = replay.replay_one("VM-FULL-IN-BOUNDS", m, cx)
    assert r.status == "reproduced", r.line()
    assert "fallback" in r.spec_sizing


def test_verify_replays_the_proofs_counterexamples_without_proving_again(monkeypatch):
    """``specbound verify`` proves the spec theorems once: its replays take the proofs'
    counterexamples (refuted sizing mutants only), never a second ``registry.run_all``."""
    from types import SimpleNamespace as NS

    from specbound.fuzz import command
    from specbound.proofs import registry

    def mutant(mid, status="refuted"):
        return NS(id=mid, status=status, counterexample={"bs": 3})
    results = [NS(id="KV-CAPACITY", mutants=[mutant("MUT-27338-MISSING-TOPK"), mutant("MUT-NO-DRAFT-ROOM", "survived")]),
               NS(id="VM-WALK-BOUNDED-NOT-A-SIZING-THEOREM", mutants=[mutant("MUT-27338-MISSING-TOPK")])]
    rows = command.spec_counterexamples(results)
    assert rows == [("KV-CAPACITY", "MUT-27338-MISSING-TOPK", {"bs": 3})]

    def proved_again():
        raise AssertionError("the spec theorems were proved again")
    seen = []
    monkeypatch.setattr(replay, "_CACHE", {})
    monkeypatch.setattr(registry, "run_all", proved_again)
    monkeypatch.setattr(replay, "replay_one", lambda tid, m, cx: seen.append((tid, m.id, cx)) or
                        replay.MutantCheck(tid, m.id, cx, status="reproduced"))
    r = command.verify_check(command.REPLAYS, spec_counterexamples=rows)
    assert (r.failures, r.examples, r.message) == (0, 1, "") and seen == rows
    assert replay._CACHE == {}, "a verify's counterexamples are its own, not every later caller's"
