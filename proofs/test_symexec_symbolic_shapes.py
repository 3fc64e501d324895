"""A block length given as a symbolic constexpr: ``tl.arange(0, B)`` with ``B`` a Z3 term that
the preconditions confine to the powers of two up to 256 (one proof for all nine kernels
Triton would compile).  Its lane is an ordinary lane with ``0 <= lane < B``; what needs the
concrete length is refused, and each refusal is shown on a planted kernel that misbehaves at
some value of ``B`` (run under the checked interpreter), so that a model at one width would
have proved something false."""

from __future__ import annotations

import pytest
import z3

from specbound.proofs import core
from specbound.proofs.symexec.interp import Executor
from specbound.proofs.symexec.obligations import instantiate
from specbound.proofs.symexec.values import INT32, INT64, LANES, SymDim, TensorModel, Unsupported, V, lane_range
from specbound.replay import load_kernel

kernels = pytest.importorskip("specbound.kernels")  # before triton: it sets TRITON_INTERPRET
torch = pytest.importorskip("torch")

B = z3.Int("B")
N = z3.Int("n")
POW2 = [1 << i for i in range(9)]
# the precondition every symbolic-length proof states: B in {1, 2, 4, ..., 256}
B_VALUES = {"B in {1,2,4,...,256}": z3.Or(*[B == v for v in POW2])}

KERNELS = '''import triton
import triton.language as tl


@triton.jit
def copy_first(out, n, B: tl.constexpr):
    offs = tl.arange(0, B)
    tl.store(out + offs, offs, mask=offs < n)


@triton.jit
def copy_first_off_by_one(out, n, B: tl.constexpr):
    offs = tl.arange(0, B)
    tl.store(out + offs, offs, mask=offs <= n)


@triton.jit
def prefix_of_program(out, lens, B: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, B)
    before = tl.sum(tl.load(lens + offs, mask=offs < pid, other=0))
    tl.store(out + pid, before)


@triton.jit
def tiled_copy(out, n, B: tl.constexpr):
    offs = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(out + offs, offs, mask=offs < n)


@triton.jit
def lanes_against_four(out, B: tl.constexpr):
    tl.store(out + (tl.arange(0, 4) - tl.arange(0, B)), 1)


@triton.jit
def count_lanes(out, B: tl.constexpr):
    ones = tl.arange(0, B) * 0 + 1
    tl.store(out + tl.sum(ones) - 1, 1)


@triton.jit
def zeros_of_length(out, B: tl.constexpr):
    z = tl.zeros((B,), dtype=tl.int32)
    tl.store(out + tl.arange(0, B) + z, 1)


@triton.jit
def full_of_length(out, B: tl.constexpr):
    ones = tl.full([B], 1, tl.int32)
    tl.store(out + tl.arange(0, B) + ones, 1)


@triton.jit
def max_of_lanes(out, B: tl.constexpr):
    offs = tl.arange(0, B)
    tl.store(out + (tl.max(offs, axis=0) - offs), 1)


@triton.jit
def min_of_lanes(out, B: tl.constexpr):
    d = 8 - tl.arange(0, B)
    tl.store(out + (d - tl.min(d, axis=0)), 1)


@triton.jit
def max_of_masked(out, n, B: tl.constexpr):
    offs = tl.arange(0, B)
    tl.store(out + tl.max(tl.where(offs < n, offs, 0), axis=0), 1)


@triton.jit
def max_of_masked_other_n(out, n, B: tl.constexpr):
    offs = tl.arange(0, B)
    tl.store(out + tl.max(tl.where(offs < n, offs, n), axis=0), 1)


@triton.jit
def loop_to_length(out, B: tl.constexpr):
    for i in range(B):
        tl.store(out + i, 1)


@triton.jit
def arange_from_one(out, B: tl.constexpr):
    tl.store(out + tl.arange(1, B), 1)


@triton.jit
def arange_of_double(out, B: tl.constexpr):
    tl.store(out + tl.arange(0, B * 2), 1)
'''


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    p = tmp_path_factory.mktemp("symshape") / "kernels.py"
    p.write_text(KERNELS)
    return str(p)


def _run(path, name, tensors, scalars=None, grid=(1,)):
    return Executor(path, name, constexprs={"B": V(B, (), INT32)}, scalars=scalars or {}, tensors=tensors,
                    grid=[z3.IntVal(g) if isinstance(g, int) else g for g in grid]).run()


def _store(run):
    return [a for a in run.accesses if a.kind == "store"][-1]


def _in_bounds(store, numel, hyps):
    """The store's in-bounds goal and its hypotheses (path, lanes, mask, preconditions)."""
    h = dict(hyps)
    h.update({label: c for label, c in store.path})
    h.update(lane_range(store.shape))
    h["active"] = store.mask
    return z3.And(store.off.e >= 0, store.off.e < numel), h


def _proved(goal, hyps) -> bool:
    try:
        core.check("symbolic-shape-test", goal, hyps=hyps)
        return True
    except (core.Refuted, core.Unknown):
        return False


def test_a_masked_copy_is_proved_for_every_length(path):
    """``out[0:n]`` through ``arange(0, B) < n``: in bounds for every B of the range once
    ``n <= B`` (the no-truncation obligation the mask raises, proved from it); the
    preconditions are satisfiable (at B = 256 among others), and both the planted off-by-one
    mask and a lifted length bound are refuted."""
    scalars = {"n": V(N, (), INT32)}
    out = TensorModel("out", N, INT64, written=True)
    pre = {**B_VALUES, "n_fits": z3.And(N >= 0, N <= B)}
    run = _run(path, "copy_first", {"out": out}, scalars)
    goal, hyps = _in_bounds(_store(run), N, pre)
    assert _proved(goal, hyps)
    assert core.satisfy("symbolic-shape-pre", {**hyps, "widest": B == 256}) is not None
    trunc = [ob for ob in run.obligations if ob.kind == "truncation"]
    assert trunc and all(_proved(ob.goal, {**pre, **dict(ob.path)}) for ob in trunc)
    assert not all(_proved(ob.goal, {**B_VALUES, **dict(ob.path)}) for ob in trunc)   # n > B cuts the copy
    mutant = _run(path, "copy_first_off_by_one", {"out": out}, scalars)
    assert not _proved(*_in_bounds(_store(mutant), N, pre))
    # the length is a lane bound: lanes up to B - 1 store, so B's range matters
    lifted = _in_bounds(_store(run), N, {"n_fits": N >= 0})
    assert not _proved(lifted[0], {k: v for k, v in lifted[1].items() if k != "active"})


def test_a_program_tiled_mask_raises_its_grid_bound(path):
    """``pid * B + arange(0, B) < n`` covers the first ``grid * B`` items: the no-truncation
    obligation ``n <= grid * B`` is raised with the symbolic B (without it a launch of too
    few programs would pass unnoticed), proved when the grid is cdiv(n, B), refuted otherwise."""
    g = z3.Int("programs")
    run = _run(path, "tiled_copy", {"out": TensorModel("out", N, INT64, written=True)},
               {"n": V(N, (), INT32)}, grid=(g,))
    (ob,) = [ob for ob in run.obligations if ob.kind == "truncation"]
    pre = {**B_VALUES, "n_nonneg": N >= 0, **dict(ob.path)}
    assert _proved(ob.goal, {**pre, "grid_is_cdiv": g == (N + B - 1) / B})
    assert not _proved(ob.goal, {**pre, "grid_short": g == (N + B - 1) / B - 1})


def test_a_masked_prefix_sum_is_exact_for_every_length(path):
    """``tl.sum(load(lens + arange(0, B), mask=arange < pid, other=0))`` is the prefix sum of
    ``lens`` up to ``pid`` at every B >= pid (memory.py's closed form, with B for N)."""
    lens = z3.Function("lens", z3.IntSort(), z3.IntSort())
    pf = z3.Function("lens_prefix", z3.IntSort(), z3.IntSort())
    g = z3.Int("programs")
    tensors = {"out": TensorModel("out", g, INT64, written=True),
               "lens": TensorModel("lens", g, INT64, lens, prefix=(pf, lambda app: {}))}
    run = _run(path, "prefix_of_program", tensors, grid=(g,))
    store, pid = _store(run), run.pid[0]
    hyps = {**B_VALUES, "programs_fit": g <= B, "prefix_zero": pf(0) == 0, **{label: c for label, c in store.path}}
    assert _proved(store.value.e == pf(pid), hyps)
    assert not _proved(store.value.e == pf(pid + 1), hyps)


def _interpreted_store_is_out_of_bounds(path, name, numel, b):
    """The planted kernel at ``B = b`` under the checked interpreter: an out-of-bounds store."""
    kernel = load_kernel(path, name)
    out = torch.zeros(numel, dtype=torch.int64)
    with pytest.raises(Exception, match="(?i)out of bound|out-of-bound|OOB|index"):
        with kernels.checked_interpreter():
            kernel[(1,)](out, B=b)


@pytest.mark.parametrize("name,construct,numel,bad", [
    # arange(0, 4) - arange(0, B): at B = 4 every offset is 0, at B = 1 the lanes are 0..3 (the
    # length-1 arange broadcasts): one lane variable for both axes would prove "offset 0"
    ("lanes_against_four", "broadcast of the symbolic block length", 1, 1),
    # the sum of B ones is B: the store is in bounds up to B = 8 only; a sum written out at any
    # one width proves it for that width
    ("count_lanes", "tl.sum over the block axis of symbolic length B", 8, 16),
    # a loop of B trips: unrolled at one value it proves that value only
    ("loop_to_length", "flows into a loop's trip count", 8, 16),
])
def test_what_needs_the_concrete_length_is_refused(path, name, construct, numel, bad):
    """Each construct that needs the concrete length is Unsupported, named; the planted kernel
    is out of bounds at B = ``bad`` (inside the range) and in bounds at smaller ones, so any
    model of it at a single width would prove a false in-bounds claim."""
    out = TensorModel("out", numel, INT64, written=True)
    with pytest.raises(Unsupported, match=construct):
        _run(path, name, {"out": out})
    _interpreted_store_is_out_of_bounds(path, name, numel, bad)


@pytest.mark.parametrize("name", ["arange_from_one", "arange_of_double"])
def test_an_arange_bound_other_than_the_constexpr_itself_is_refused(path, name):
    """Only ``arange(0, B)`` with B the constexpr: a shifted start or arithmetic on B is no
    lane range the model states (and ``B * 2`` is no constexpr the launch fixes)."""
    with pytest.raises(Unsupported, match="tl.arange with non-constexpr bounds"):
        _run(path, name, {"out": TensorModel("out", 512, INT64, written=True)})


def test_lanes_of_a_symbolic_length_stay_below_it():
    """The lane range of an axis of symbolic length is ``0 <= lane < B``, nothing wider."""
    (label, rng), = lane_range((SymDim(B, "B"),)).items()
    assert _proved(LANES[0] < B, {**B_VALUES, label: rng})
    assert not _proved(LANES[0] < B - 1, {**B_VALUES, label: rng})


def _in_bounds_with_lemmas(run, numel, hyps):
    """The last store's in-bounds goal, its hypotheses with the instances of every reduction's
    schema (witness lane, attainment, bound against each lane)."""
    goal, h = _in_bounds(_store(run), numel, hyps)
    h, lemmas = instantiate(h, goal, run.functions, [])
    assert not lemmas
    return goal, h


B_UP_TO_8 = {"B in {1,2,4,8}": z3.Or(*[B == v for v in POW2[:4]])}


@pytest.mark.parametrize("name,numel", [
    # tl.zeros((B,)) / tl.full([B], 1): a constant at every lane of arange(0, B)'s axis
    ("zeros_of_length", 8), ("full_of_length", 9),
    # max(arange(0, B)) - lane and d - min(d) for d = 8 - lane: 0 .. B - 1, kept at or above
    # 0 by the bound against every lane and below B by the witness lane that attains it
    ("max_of_lanes", 8), ("min_of_lanes", 8),
])
def test_fills_and_extrema_of_a_symbolic_length_are_exact(path, name, numel):
    """A fill and a min/max over the axis of ``arange(0, B)`` are modelled at every length:
    the store is proved in bounds for B up to 8 and refuted over the whole range, as the
    interpreter shows it out of bounds at B = 16 (a model at any one width of 8 or less, or
    one that dropped the bound or the witness, would claim it for every B)."""
    run = _run(path, name, {"out": TensorModel("out", numel, INT64, written=True)})
    assert _proved(*_in_bounds_with_lemmas(run, numel, B_UP_TO_8))
    assert not _proved(*_in_bounds_with_lemmas(run, numel, B_VALUES))
    _interpreted_store_is_out_of_bounds(path, name, numel, 16)


def test_a_masked_max_depends_on_the_other_value(path):
    """``max(where(arange(0, B) < n, arange, other))``: with other 0 it is n - 1, in bounds of
    ``out[0:n]`` for every B >= n; with other n the lanes past n attain n (out of bounds
    whenever B > n, as the interpreter shows at B = 16, n = 8), which the model refutes."""
    out = TensorModel("out", N, INT64, written=True)
    pre = {**B_VALUES, "n_fits": z3.And(N >= 1, N <= B)}
    run = _run(path, "max_of_masked", {"out": out}, {"n": V(N, (), INT32)})
    assert _proved(*_in_bounds_with_lemmas(run, N, pre))
    mutant = _run(path, "max_of_masked_other_n", {"out": out}, {"n": V(N, (), INT32)})
    assert not _proved(*_in_bounds_with_lemmas(mutant, N, pre))
    assert _proved(*_in_bounds_with_lemmas(mutant, N, {**pre, "full": N == B}))   # no lane masked
    kernel = load_kernel(path, "max_of_masked_other_n")
    with pytest.raises(Exception, match="(?i)out of bound|out-of-bound|OOB|index"):
        with kernels.checked_interpreter():
            kernel[(1,)](torch.zeros(8, dtype=torch.int64), 8, B=16)


def test_an_empty_axis_leaves_the_extremum_unconstrained(path):
    """Were B = 0 allowed (Triton compiles no arange(0, 0)), no lane attains the max: the
    witness is guarded by B >= 1, so the hypotheses stay satisfiable (an unguarded
    0 <= w < 0 would contradict them: every claim would follow)."""
    run = _run(path, "max_of_lanes", {"out": TensorModel("out", 8, INT64, written=True)})
    _goal, hyps = _in_bounds_with_lemmas(run, 8, {"empty": B == 0})
    for label in ("active", "lane0_range"):   # the store's lanes: none at B = 0
        hyps.pop(label)
    assert any("witness_lane" in label for label in hyps)
    assert core.satisfy("symbolic-shape-empty", hyps) is not None
