"""Each construct the executor learned for sglang's kernels, checked against the
checked interpreter: a small kernel per construct, random concrete launches, and the
symbolic stores evaluated at the concrete point must leave exactly the interpreter's output."""

from __future__ import annotations

import random
import textwrap

import pytest
import z3

from specbound.proofs import core
from specbound.proofs.symexec import flow, selfcheck
from specbound.proofs.symexec.interp import Executor
from specbound.proofs.symexec.values import FLOATS, INT32, INT64, TensorModel, Unsupported, V
from specbound.replay import load_kernel

pytest.importorskip("specbound.kernels")  # before triton: it sets TRITON_INTERPRET
torch = pytest.importorskip("torch")

FIXTURES = textwrap.dedent('''
    import triton
    import triton.language as tl


    @triton.jit
    def grid3(out, n):
        x = tl.program_id(0)
        y = tl.program_id(axis=1)
        z = tl.program_id(2)
        nx = tl.num_programs(0)
        ny = tl.num_programs(axis=1)
        tl.store(out + x + nx * (y + ny * z), x * 100 + y * 10 + z + n)


    @triton.jit
    def early_return(out, vals, limit, FLAG: tl.constexpr):
        p = tl.program_id(0)
        v = tl.load(vals + p)
        if FLAG and v > limit:
            return
        tl.store(out + p, v)
        if v < 0 or v == 7:
            return
        tl.store(out + tl.num_programs(0) + p, v + 1)


    @triton.jit
    def merges(out, vals, MODE: tl.constexpr):
        p = tl.program_id(0)
        v = tl.load(vals + p)
        found = 0
        pos = 0
        for j in range(4):
            if found == 0:
                if tl.load(vals + j) == v:
                    found = 1
                    pos = j
        if MODE == 1:
            pos = pos + 10
        tl.store(out + p, pos * 2 + found)


    @triton.jit
    def carried(out, vals, n, BLOCK: tl.constexpr):
        off = tl.arange(0, BLOCK)
        for _ in range(tl.cdiv(n, BLOCK)):
            m = off < n
            tl.store(out + off, tl.load(vals + off, mask=m) * 2, mask=m)
            off += BLOCK


    @triton.jit
    def strided(out, n, BLOCK: tl.constexpr):
        p = tl.program_id(0)
        g = tl.num_programs(0)
        for i in range(p, tl.cdiv(n, BLOCK), g):
            c = i * BLOCK + tl.arange(0, BLOCK)
            tl.store(out + c, c + p * 1000, mask=c < n)


    @triton.jit
    def _pick(ptr, i, table, SCALE: tl.constexpr, USE_TABLE: tl.constexpr):
        x = tl.load(ptr + i)
        if USE_TABLE and table is not None:
            x = tl.load(table + x)
        return x * SCALE


    @triton.jit
    def helpers(out, vals, table=None, USE_TABLE: tl.constexpr = False):
        p = tl.program_id(0)
        tl.store(out + p, _pick(vals, p, table, 3, USE_TABLE))


    @triton.jit
    def rmw(out, vals, N: tl.constexpr):
        p = tl.program_id(0)
        base = p * N
        first = tl.load(vals + p * N)
        if first > 1:
            tl.store(out + base + first, 50)
        for j in range(N):
            cur = tl.load(out + base + tl.load(vals + p * N + j))
            if cur > 1:
                tl.store(out + base + j, cur + 100)
            else:
                tl.store(out + base + j, j)


    @triton.jit
    def prefix(out, vals, N: tl.constexpr):
        p = tl.program_id(0)
        lane = tl.arange(0, N)
        s = tl.sum(tl.load(vals + lane, mask=lane < p, other=0))
        tl.store(out + p, s)


    @triton.jit
    def misc(out, vals, W: tl.constexpr):
        p = tl.program_id(0)
        B: tl.constexpr = 4 if W > 2 else 8
        v = tl.load(vals + p)
        w = tl.minimum(tl.maximum(v, 0), W)
        tl.store(out + B + p - B, tl.cast(w, tl.int64) + B)
''')


RUNTIME_IFEXP = textwrap.dedent('''


    @triton.jit
    def runtime_ifexp(out, vals):
        p = tl.program_id(0)
        prev = 0 if p == 0 else tl.load(vals + p - 1)
        tl.store(out + p, prev * 10 + tl.load(vals + p))
''')
FIXTURES += RUNTIME_IFEXP


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    path = tmp_path_factory.mktemp("constructs") / "constructs.py"
    path.write_text(FIXTURES)
    return str(path)


class Launch:
    """One kernel: its symbolic model and a concrete launch under the checked interpreter."""

    def __init__(self, path, name, grid, *, inputs=None, out_size, scalars=None, constexprs=None, prefix=None,
                 out_init=0):
        self.path, self.name, self.grid = path, name, grid
        self.inputs = inputs or {}                       # tensor name -> list of int64 contents
        self.scalars = scalars or {}                     # name -> int
        self.constexprs = constexprs or {}
        self.out_size, self.out_init, self.prefix = out_size, out_init, prefix

    def symbolic(self):
        functions = {}
        tensors = {"out": TensorModel("out", self.out_size, INT64, written=True)}
        for name in self.inputs:
            f = z3.Function(name, z3.IntSort(), z3.IntSort())
            pf = None
            if name == self.prefix:
                pf = z3.Function(f"{name}_prefix", z3.IntSort(), z3.IntSort())
                pf = (pf, lambda app, pf=pf, f=f: {"zero": pf(0) == 0, f"step@{app.arg(0)}": z3.Implies(
                    app.arg(0) >= 0, pf(app.arg(0) + 1) == pf(app.arg(0)) + f(app.arg(0)))})
            tensors[name] = TensorModel(name, len(self.inputs[name]), INT64, f, prefix=pf)
            functions[name] = (f, lambda app: {})
        scalars = {n: V(z3.Int(n), (), INT32) for n in self.scalars}
        grid = [z3.IntVal(g) for g in self.grid]
        run = Executor(self.path, self.name, constexprs=self.constexprs, scalars=scalars, tensors=tensors,
                       grid=grid).run()
        run.functions.update(functions)
        return run

    def tables(self):
        out = dict(self.inputs)
        if self.prefix:
            vals = self.inputs[self.prefix]
            out[f"{self.prefix}_prefix"] = [sum(vals[:i]) for i in range(len(vals) + 1)]
        out["out_initial"] = [self.out_init] * self.out_size
        return out

    def interpreted(self):
        from specbound.kernels import checked_interpreter

        kernel = load_kernel(self.path, self.name)
        out = torch.full((self.out_size,), self.out_init, dtype=torch.int64)
        args = {n: torch.tensor(v, dtype=torch.int64) for n, v in self.inputs.items()}
        with checked_interpreter():
            kernel[tuple(self.grid)](out, **args, **self.scalars, **self.constexprs)
        return out.tolist()

    def compare(self):
        run = self.symbolic()
        writes = selfcheck.concrete_writes(_Run(run), self.scalars, self.tables(), tuple(self.grid))
        mem = selfcheck.final_memory(writes, {"out": [self.out_init] * self.out_size})
        return mem["out"], self.interpreted()


class _Run:
    """What selfcheck.concrete_writes reads from a model's Run."""

    def __init__(self, result):
        self.result, self.functions = result, result.functions


def _check(launch):
    symbolic, interpreted = launch.compare()
    assert symbolic == interpreted


@pytest.mark.parametrize("seed", range(2))
def test_three_axis_grid_and_num_programs(source, seed):
    rng = random.Random(seed)
    g = (rng.randint(1, 3), rng.randint(1, 3), rng.randint(1, 3))
    _check(Launch(source, "grid3", g, out_size=g[0] * g[1] * g[2], scalars={"n": rng.randint(0, 9)}))


@pytest.mark.parametrize("flag,seed", [(f, s) for f in (False, True) for s in range(2)])
def test_early_return(source, flag, seed):
    rng = random.Random(seed)
    vals = [rng.randint(-3, 9) for _ in range(6)]
    _check(Launch(source, "early_return", (6,), inputs={"vals": vals}, out_size=12,
                  scalars={"limit": rng.randint(0, 8)}, constexprs={"FLAG": flag}, out_init=-99))


@pytest.mark.parametrize("mode,seed", [(m, s) for m in (0, 1) for s in range(2)])
def test_forks_merge_ints_and_values(source, mode, seed):
    rng = random.Random(seed)
    _check(Launch(source, "merges", (6,), inputs={"vals": [rng.randint(0, 4) for _ in range(6)]}, out_size=6,
                  constexprs={"MODE": mode}))


@pytest.mark.parametrize("seed", range(3))
def test_loop_carried_induction_variable(source, seed):
    rng = random.Random(seed)
    n = rng.randint(0, 40)
    _check(Launch(source, "carried", (1,), inputs={"vals": [rng.randint(-5, 5) for _ in range(48)]}, out_size=48,
                  scalars={"n": n}, constexprs={"BLOCK": 8}))


@pytest.mark.parametrize("seed", range(3))
def test_range_with_symbolic_start_and_step(source, seed):
    rng = random.Random(seed)
    _check(Launch(source, "strided", (rng.randint(1, 4),), out_size=64, scalars={"n": rng.randint(0, 60)},
                  constexprs={"BLOCK": 8}, out_init=-1))


@pytest.mark.parametrize("use_table", (False, True))
def test_inlined_helper_and_optional_argument(source, use_table):
    rng = random.Random(7)
    inputs = {"vals": [rng.randint(0, 5) for _ in range(4)]}
    if use_table:
        inputs["table"] = [rng.randint(-9, 9) for _ in range(6)]
    _check(Launch(source, "helpers", (4,), inputs=inputs, out_size=4, constexprs={"USE_TABLE": use_table}))


@pytest.mark.parametrize("seed", range(3))
def test_reads_of_cells_the_program_wrote(source, seed):
    """The first write is inside a branch; later reads see it (or the caller's contents)."""
    rng = random.Random(seed)
    _check(Launch(source, "rmw", (3,), inputs={"vals": [rng.randint(0, 3) for _ in range(12)]}, out_size=12,
                  constexprs={"N": 4}, out_init=-5))


@pytest.mark.parametrize("seed", range(2))
def test_masked_prefix_sum(source, seed):
    rng = random.Random(seed)
    _check(Launch(source, "prefix", (8,), inputs={"vals": [rng.randint(0, 50) for _ in range(8)]}, out_size=8,
                  constexprs={"N": 8}, prefix="vals"))


@pytest.mark.parametrize("w", (2, 5))
def test_minimum_maximum_cast_conditional_expression_pointer_minus_int(source, w):
    rng = random.Random(w)
    _check(Launch(source, "misc", (6,), inputs={"vals": [rng.randint(-4, 9) for _ in range(6)]}, out_size=6,
                  constexprs={"W": w}))


def test_the_check_sees_a_wrong_loop_model(source, monkeypatch):
    """Planted in the executor: induction variables one iteration ahead (``x0 + (k+1)*c``,
    still "inductive").  The comparison with the interpreter must fail."""
    real = flow._closed_form
    monkeypatch.setattr(flow, "_closed_form", lambda ex, x0, c, k, line: real(ex, x0, c, k + 1, line))
    launch = Launch(source, "carried", (1,), inputs={"vals": list(range(48))}, out_size=48, scalars={"n": 20},
                    constexprs={"BLOCK": 8})
    symbolic, interpreted = launch.compare()
    assert symbolic != interpreted


@pytest.mark.parametrize("body,construct", [
    ("    x = 1\n    for _ in range(n):\n        x = x * 2\n    tl.store(out, 0)\n", "not an induction variable"),
    ("    for i in range(n):\n        if i > 3:\n            return\n        tl.store(out + i, 0)\n",
     "return inside a symbolic loop"),
    ("    if n > 0:\n        y = 1\n    tl.store(out, y)\n", "bound on one path"),
    ("    x = tl.arange(0, 4)\n    tl.store(out + x, x if x > 1 else 0)\n", "conditional expression on a block value"),
])
def test_what_stays_unsupported_is_named(tmp_path, body, construct):
    src = tmp_path / "k.py"
    src.write_text("import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(out, n):\n" + body)
    out = TensorModel("out", 8, INT64, written=True)
    with pytest.raises(Unsupported, match=construct):
        Executor(str(src), "k", constexprs={}, scalars={"n": V(z3.Int("n"), (), INT32)}, tensors={"out": out},
                 grid=[z3.IntVal(1)]).run()


@pytest.mark.parametrize("seed", range(2))
def test_conditional_expression_on_a_runtime_scalar(source, seed):
    """``a if c else b`` on a program id: each side runs under its own condition (the load
    of ``vals[p - 1]`` only where ``p > 0``)."""
    rng = random.Random(seed)
    _check(Launch(source, "runtime_ifexp", (5,), inputs={"vals": [rng.randint(0, 9) for _ in range(5)]}, out_size=5))


def test_the_check_sees_a_wrong_conditional_expression(source, monkeypatch):
    """Planted in the executor: the two sides of a runtime ``a if c else b`` swapped."""
    import ast

    real = flow.if_exp

    def swapped(ex, node, test, env):
        return real(ex, ast.copy_location(ast.IfExp(node.test, node.orelse, node.body), node), test, env)
    monkeypatch.setattr(flow, "if_exp", swapped)
    symbolic, interpreted = Launch(source, "runtime_ifexp", (5,), inputs={"vals": [1, 2, 3, 4, 5]}, out_size=5).compare()
    assert symbolic != interpreted


FLAG_AND_FLOATS = '''import triton
import triton.language as tl


@triton.jit
def flagged(out, vals, n):
    rejected = False
    for i in range(n):
        if not rejected:
            v = tl.load(vals + i)
            tl.store(out + i, v)
            rejected = v == 3


@triton.jit
def argmax_index(out, probs, BLOCK: tl.constexpr):
    lanes = tl.arange(0, BLOCK)
    p = tl.load(probs + lanes)
    score = tl.where(lanes < BLOCK, p * 2.0, float("-inf"))
    best, at = tl.max(score, axis=0, return_indices=True)
    if best > 0.5:
        tl.store(out + at, 1)


@triton.jit
def argmax_call(out, probs, BLOCK: tl.constexpr):
    lanes = tl.arange(0, BLOCK)
    p = tl.load(probs + lanes)
    at = tl.argmax(p / 2.0, axis=-1)
    tl.store(out + at, 1)
'''


def _run_small(tmp_path, name, tensors, scalars=None, constexprs=None, **kw):
    src = tmp_path / "k.py"
    src.write_text(FLAG_AND_FLOATS)
    return Executor(str(src), name, constexprs=constexprs or {}, scalars=scalars or {}, tensors=tensors,
                    grid=[z3.IntVal(1)], **kw).run()


def _provable(run, goal):
    hyps = {label: c for label, c in run.accesses[-1].path}
    try:
        core.check("construct-test", goal, hyps=hyps)
        return True
    except (core.Refuted, core.Unknown):
        return False


def test_an_abstracted_loop_carried_flag(tmp_path):
    """A flag the model names is any value at an arbitrary iteration (flow.havoc); without the
    opt-in it stays unsupported.  The store at ``out + i`` keeps its loop bound ``i < n``."""
    n = z3.Int("n")
    tensors = {"out": TensorModel("out", n, INT64, written=True), "vals": TensorModel("vals", n, INT64)}
    scalars = {"n": V(n, (), INT32)}
    with pytest.raises(Unsupported, match="not an induction variable"):
        _run_small(tmp_path, "flagged", tensors, scalars)
    run = _run_small(tmp_path, "flagged", tensors, scalars, abstract_carried=("rejected",))
    store = run.accesses[-1]
    assert store.kind == "store" and any(label.startswith("if@") for label, _ in store.path)
    assert _provable(run, z3.And(store.off.e >= 0, store.off.e < n))
    assert not _provable(run, store.off.e < n - 1)   # non-vacuous: the last cell is reached


@pytest.mark.parametrize("kernel", ["argmax_index", "argmax_call"])
def test_opaque_floats_and_the_argmax_index(tmp_path, kernel):
    """Float loads, literals, arithmetic, where, comparison, ``tl.max(..., return_indices=True)``
    (``argmax_index``) and ``tl.argmax(x, axis=-1)`` (``argmax_call``: vLLM < 0.17's
    recovered-token kernel, the negative axis counted from the end) run as opaque values; the
    index is some lane: ``out + at`` stays inside ``BLOCK`` cells, and not inside ``BLOCK - 1``."""
    tensors = {"out": TensorModel("out", 8, INT64, written=True), "probs": TensorModel("probs", 8, FLOATS["float32"])}
    run = _run_small(tmp_path, kernel, tensors, constexprs={"BLOCK": 8})
    store = run.accesses[-1]
    assert store.kind == "store"
    assert _provable(run, z3.And(store.off.e >= 0, store.off.e < 8))
    assert not _provable(run, store.off.e < 7)
