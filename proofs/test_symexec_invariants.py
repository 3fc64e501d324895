"""Loop summaries by checked interval invariants (proofs/symexec/invariants.py): a loop whose
trip count is a symbolic constexpr, counting down, with loop-carried variables that are not
induction variables.  Only invariants the core proved inductive are assumed: a candidate
that holds initially but is not preserved is dropped, and with that check disabled the
summary would prove an overrun in bounds (the check is what makes the test red)."""

from __future__ import annotations

import pytest
import z3

from specbound.proofs import core
from specbound.proofs.symexec import invariants
from specbound.proofs.symexec.interp import Executor
from specbound.proofs.symexec.models import make_oracle
from specbound.proofs.symexec.values import INT32, INT64, TensorModel, Unsupported, V

KERNELS = '''import triton
import triton.language as tl


@triton.jit
def last_match(out, vals, key, n: tl.constexpr):
    pos = 0
    found = 0
    for i in range(n - 1, 0, -1):
        if found == 0:
            if tl.load(vals + i) == key:
                pos = i
                found = 1
    tl.store(out + pos, found)


@triton.jit
def drifting(out, vals, key, n: tl.constexpr):
    pos = 0
    for i in range(n):
        if tl.load(vals + i) == key:
            pos = pos + 2
    tl.store(out + pos, 1)


@triton.jit
def counter(out, vals, steps: tl.constexpr):
    count = 0
    for j in range(steps):
        tl.store(out + count, 1)
        if tl.load(vals + j) != 0:
            count += 1


@triton.jit
def counted(out, vals, steps: tl.constexpr):
    count = 0
    for j in range(steps):
        if tl.load(vals + j) != 0:
            count += 1
    tl.store(out + count, 1)
'''

N = z3.Int("n")
PRECONDITIONS = {"n_positive": z3.And(N >= 1, N < 2**20)}


def _run(tmp_path, name, summarise=True):
    src = tmp_path / "k.py"
    src.write_text(KERNELS)
    tensors = {"out": TensorModel("out", N, INT64, written=True), "vals": TensorModel("vals", N, INT64)}
    size = "steps" if name.startswith("count") else "n"
    scalars = {} if name.startswith("count") else {"key": V(z3.Int("key"), (), INT64)}
    ex = Executor(str(src), name, constexprs={size: V(N, (), INT32)}, scalars=scalars, tensors=tensors,
                  grid=[z3.IntVal(1)], summarise_loops=summarise, oracle=make_oracle(PRECONDITIONS, {}, []))
    return ex.run()


def _provable(access, goal):
    hyps = {label: c for label, c in access.path}
    hyps.update(PRECONDITIONS)
    try:
        core.check("invariant-test", goal, hyps=hyps)
        return True
    except (core.Refuted, core.Unknown):
        return False


def _in_bounds(access, numel=N):
    return z3.And(access.off.e >= 0, access.off.e < numel)


def test_a_countdown_search_is_summarised(tmp_path):
    """``pos`` is 0 or an index of ``range(n - 1, 0, -1)``: the store is in bounds, and may
    reach the last cell (the summary is not vacuous); the read of ``vals + i`` too."""
    res = _run(tmp_path, "last_match")
    load, store = res.accesses[0], res.accesses[-1]
    assert load.kind == "load" and store.kind == "store"
    assert _provable(load, z3.And(load.off.e >= 1, load.off.e < N))
    assert _provable(store, _in_bounds(store))
    assert not _provable(store, store.off.e < N - 1)
    assert res.invariant_proofs and all(core.is_proof(p) for p in res.invariant_proofs)


def test_without_the_opt_in_a_symbolic_trip_count_stays_refused(tmp_path):
    with pytest.raises(Unsupported, match="trip count"):
        _run(tmp_path, "last_match", summarise=False)


def test_a_candidate_that_is_not_preserved_is_dropped(tmp_path):
    """``pos`` grows by 2 per match: ``pos <= 0``, ``pos <= x0 + k`` hold initially and fail
    consecution, so the store past ``out`` is not proved in bounds."""
    res = _run(tmp_path, "drifting")
    store = res.accesses[-1]
    assert _provable(store, store.off.e >= 0)
    assert not _provable(store, _in_bounds(store))


def test_without_consecution_the_summary_would_prove_an_overrun(tmp_path, monkeypatch):
    """The check that makes the test above pass: with consecution taken on trust the summary
    keeps ``pos <= 0`` and proves the overrunning store in bounds."""
    real = invariants._holds
    monkeypatch.setattr(invariants, "_holds",
                        lambda ex, name, goal: True if "-step@" in name else real(ex, name, goal))
    store = _run(tmp_path, "drifting").accesses[-1]
    assert _provable(store, _in_bounds(store))


def test_a_counter_bounded_by_the_iteration(tmp_path):
    """``count`` moves by at most one per iteration: ``count <= k`` (the ``x <= x0 + k``
    candidate) puts the store of iteration ``k < steps`` inside ``out``."""
    res = _run(tmp_path, "counter")
    store = next(a for a in res.accesses if a.kind == "store")
    assert _provable(store, _in_bounds(store))
    assert not _provable(store, store.off.e < N - 1)


def test_after_the_loop_the_counter_is_bounded_by_the_trip_count(tmp_path):
    """After ``range(steps)``, ``count <= 0 + k`` holds at ``k = steps`` (the trip count): the
    store at ``out + count`` stays inside ``steps + 1`` cells, and can reach the last one."""
    store = _run(tmp_path, "counted").accesses[-1]
    assert _provable(store, _in_bounds(store, N + 1))
    assert not _provable(store, store.off.e < N)
