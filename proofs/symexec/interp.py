"""Execute a ``@triton.jit`` function's Python body symbolically.

The body is read from the kernel's source file with :mod:`ast` (never imported: no torch,
no triton) and walked statement by statement against a Z3 stand-in for
``triton.language``.  Only the constructs our kernels use are modelled; everything else
raises :class:`~.values.Unsupported` naming the construct and its line.

What one run produces (:class:`ExecResult`): every load and store (tensor, offset block,
mask, path condition, stored value), and the obligations the executor itself raises on
the way (int wrap at the points a wrapped value is observed, truncation of
``arange(N) < x`` masks, division by zero, ``device_assert``).  Bounds, footprint and
race obligations are built from the accesses by :mod:`.obligations`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any, Callable

import z3

from . import flow, memory
from .values import (
    DTYPES, INT1, INT32, INT64, LANES, MAX_RANK, Access, DType, LaneTag, LoadSource, Ptr, PtrDType,
    Unsupported, V, as_bool, as_int, broadcast, conjuncts, fresh_name, lane_range, lane_vars_in, lift,
    mentions, promote, reshape,
)


@dataclass
class Ob:
    """An obligation raised during execution: ``hyps (path, lanes, activation) => goal``."""

    kind: str           # "wrap" | "truncation" | "assert" | "divzero" | "cast" | "value"
    line: int
    goal: Any
    path: list
    shape: tuple
    note: str
    active: Any = True  # activation condition (a mask), part of the hypotheses


@dataclass(slots=True)
class ExecResult:
    accesses: list
    obligations: list
    functions: dict          # FuncDecl name -> schema(app) (contents, reductions, witnesses)
    pid: Any
    grid: Any
    local_consts: list       # program-local constants (pid, loop indices): renamed per copy
    side_proofs: list = field(default_factory=list)      # the oracle's proofs the run's terms rest on
    invariant_proofs: list = field(default_factory=list)  # loop invariants proved inductive (flow.py)
    content_hyps: dict = field(default_factory=dict)     # quantified hypotheses on contents (memory.py)
    # the launch's shape, set by the kernel's model after the run (its regions read them)
    block: Any = None          # requests one program handles
    extra_owner: bool = False  # program 0 also owns the cells before the first block (draft_kv)
    batch: Any = None          # the batch size (int or Z3 term)


# --- Triton's arithmetic on Z3 terms -------------------------------------------------------

def tdiv(a, b):
    """C (truncating) integer division, as Triton computes ``//`` on integers."""
    if z3.is_int_value(b) and b.as_long() > 0:
        return z3.If(a >= 0, a / b, -((-a) / b))
    return z3.If(b > 0, z3.If(a >= 0, a / b, -((-a) / b)), z3.If(a >= 0, -(a / (-b)), (-a) / (-b)))


def tmod(a, b):
    """C remainder: ``a - b * tdiv(a, b)`` (sign of the dividend)."""
    return a - b * tdiv(a, b)


class TL:
    """Marker for the stand-in of ``triton.language`` (attributes resolved by the executor)."""


class TritonMod:
    """Marker for the stand-in of ``triton``."""


class Executor:
    def __init__(self, path: str, func_name: str, *, constexprs: dict, scalars: dict,
                 tensors: dict, grid: list, transform: Callable | None = None,
                 max_unroll: int = 64, oracle: Callable | None = None):
        self.path = path
        self.func_name = func_name
        self.constexprs = dict(constexprs)
        self.scalars = scalars
        self.tensors = tensors
        self.grid = grid
        self.transform = transform
        self.max_unroll = max_unroll
        self.path_cond: list = []
        self.accesses: list = []
        self.obligations: list = []
        self.functions: dict = {}
        self.local_consts: list = []
        self.loops: dict = {}    # loop index name -> (stop, step)
        self.pid = [z3.Int(f"pid{i}") for i in range(len(grid))]
        self._seen_wrap: set = set()
        self.trunc_candidates: list = []
        self.trunc_lines: set = set()
        self.store_mask = None
        self.oracle = oracle          # (name, hyps, goal) -> Proof | None: side facts that simplify terms
        self.side_proofs: list = []
        # issue 15: control flow and memory beyond straight-line code (flow.py, memory.py)
        self.mem: dict = {}              # tensor name -> flow.MemState (the program's own writes)
        self.initial_contents: dict = {}  # tensor name -> FuncDecl (contents before the launch)
        self.dropped: dict = {}          # name -> line of the fork after which it is unbound
        self.helper_depth = 0
        self.symbolic_loops = 0
        self.invariant_proofs: list = []  # loop invariants proved inductive by the core
        self.content_hyps: dict = {}     # quantified hypotheses on contents the run introduces (memory.py)

    # --- source -----------------------------------------------------------------------------
    def load_module(self):
        text = open(self.path).read()
        tree = ast.parse(text)
        if self.transform is not None:
            tree = self.transform(tree)
            ast.fix_missing_locations(tree)
        self.globals = {"tl": TL(), "triton": TritonMod()}
        from specbound import spec as spec_mod
        for node in tree.body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                    and isinstance(node.value, ast.Call) and _is_tl_attr(node.value.func, "constexpr"):
                inner = ast.Expression(node.value.args[0])
                self.globals[node.target.id] = eval(compile(inner, self.path, "eval"),
                                                    {"int": int, "spec": spec_mod})
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name != self.func_name and is_jit(node):
                self.globals.setdefault(node.name, flow.JitFn(node))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == self.func_name:
                return node
        raise Unsupported(f"no function {self.func_name} in {self.path}")

    # --- running ---------------------------------------------------------------------------
    def run(self) -> ExecResult:
        fn = self.load_module()
        env: dict = {}
        for i, p in enumerate(self.pid):
            self.local_consts.append(p)
            self.path_cond.append((f"program_id{i}_in_grid", z3.And(p >= 0, p < self.grid[i])))
        params = fn.args.args
        defaults = dict(zip([a.arg for a in params[len(params) - len(fn.args.defaults):]], fn.args.defaults))
        for arg in params:
            name = arg.arg
            if name in self.constexprs:
                env[name] = self.constexprs[name]
            elif name in self.tensors:
                env[name] = Ptr(self.tensors[name], V(z3.IntVal(0), (), INT64))
            elif name in self.scalars:
                env[name] = self.scalars[name]
            elif name in defaults and isinstance(defaults[name], ast.Constant):
                env[name] = self.eval(defaults[name], {})   # an optional argument left at its default
            else:
                raise Unsupported(f"kernel argument {name!r} has no model")
        self.exec_block(fn.body, env)
        self.finish_truncation()
        return ExecResult(self.accesses, self.obligations, self.functions, self.pid, self.grid,
                          self.local_consts, self.side_proofs, self.invariant_proofs, self.content_hyps)

    def exec_block(self, stmts, env):
        """Run ``stmts``; returns the condition under which they returned (``False``: never,
        ``True``: on every path, else a Z3 Bool); after a partial return the rest of the block
        runs under its negation (flow.py)."""
        return self.run_guarded((st.lineno, lambda st=st: self.exec_stmt(st, env)) for st in stmts)

    def run_guarded(self, steps):
        """Run ``(line, thunk)`` steps in order; each returns a return condition (None/False,
        True, or a Z3 Bool).  A partial return makes the later steps run under its negation;
        the combined return condition comes back."""
        returned, pushed = False, []
        try:
            for line, step in steps:
                r = step()
                if r is None or r is False:
                    continue
                if r is True:
                    return True
                returned = flow.r_or(returned, r)
                pushed.append(self.push_path(f"not_returned@{line}", z3.Not(r)))
        finally:
            for entry in pushed:
                self.drop_path(entry)
        return returned

    def push_path(self, label, cond):
        """Append a path condition under a label not yet on the path; the entry, for drop_path."""
        labels = {lb for lb, _ in self.path_cond}
        base, k = label, 1
        while label in labels:
            k += 1
            label = f"{base}#{k}"
        entry = (label, cond)
        self.path_cond.append(entry)
        return entry

    def drop_path(self, entry):
        for i in range(len(self.path_cond) - 1, -1, -1):
            if self.path_cond[i] is entry:
                del self.path_cond[i]
                return

    def exec_stmt(self, st, env):
        line = st.lineno
        if not self.helper_depth:
            self.cur_env = env   # accesses record the kernel's own variables (footprint maps)
        if isinstance(st, ast.Expr):
            if isinstance(st.value, ast.Constant):
                return  # docstring
            self.eval(st.value, env)
        elif isinstance(st, ast.Assign):
            value = self.eval(st.value, env)
            for target in st.targets:
                self.bind(target, value, env, line)
        elif isinstance(st, ast.AugAssign):
            if not isinstance(st.target, ast.Name):
                raise Unsupported("augmented assignment to a non-name", line)
            cur = self.lookup(st.target.id, env, line)
            env[st.target.id] = self.binop(type(st.op), cur, self.eval(st.value, env), line)
        elif isinstance(st, ast.AnnAssign):
            if st.value is None:
                return
            self.bind(st.target, self.eval(st.value, env), env, line)
        elif isinstance(st, ast.For):
            return self.exec_for(st, env)
        elif isinstance(st, ast.If):
            test = self.eval(st.test, env)
            if isinstance(test, (bool, int)) or test is None:
                return self.exec_block(st.body if test else st.orelse, env)
            return flow.fork(self, st, test, env)
        elif isinstance(st, ast.Pass):
            return None
        elif isinstance(st, ast.Return):
            if self.helper_depth:
                raise Unsupported("return inside an inlined helper other than its last statement", line)
            if st.value is not None:
                raise Unsupported("kernel return with a value", line)
            if self.symbolic_loops:
                raise Unsupported("return inside a symbolic loop", line)
            return True
        else:
            raise Unsupported(f"statement {type(st).__name__}", line)
        return None

    def exec_for(self, st, env):
        line = st.lineno
        if not isinstance(st.target, ast.Name):
            raise Unsupported("for loop target that is not a name", line)
        if st.orelse:
            raise Unsupported("for ... else", line)
        for node in ast.walk(st):
            if isinstance(node, (ast.Break, ast.Continue)):
                raise Unsupported(f"{type(node).__name__.lower()} in a loop", node.lineno)
        it = st.iter
        if not (isinstance(it, ast.Call) and (_is_name(it.func, "range") or _is_tl_attr(it.func, "static_range")
                                              or _is_tl_attr(it.func, "range"))):
            raise Unsupported("loop over something other than range/tl.range/tl.static_range", line)
        args = [self.eval(a, env) for a in it.args]
        if len(args) == 1:
            start, stop, step = 0, args[0], 1
        elif len(args) == 2:
            start, stop, step = args[0], args[1], 1
        else:
            start, stop, step = args
        if all(isinstance(x, int) for x in (start, stop, step)):
            trips = list(range(start, stop, step))
            if len(trips) > self.max_unroll:
                raise Unsupported(f"constexpr loop of {len(trips)} trips (unroll limit {self.max_unroll})", line)
            def trip(i):   # unrolled: a return in one trip guards the later ones
                env[st.target.id] = i
                return self.exec_block(st.body, env)
            return self.run_guarded((line, lambda i=i: trip(i)) for i in trips)
        if _is_tl_attr(it.func, "static_range"):
            raise Unsupported("tl.static_range with a non-constexpr bound", line)
        # One iteration at a symbolic index; variables assigned in the body must be new.
        assigned = {n.id for node in st.body for n in ast.walk(node)
                    if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        carried = sorted(a for a in assigned if a in env)
        simple = start == 0 and isinstance(step, int) and step > 0 and isinstance(stop, V) and stop.shape == ()
        if carried or not simple:
            flow.symbolic_loop(self, st, env, start, stop, step)   # induction variables, symbolic start/step
            return None
        self.observe(stop, line, "loop bound")
        idx = z3.Int(fresh_name(f"{st.target.id}@{line}"))
        self.local_consts.append(idx)
        stop_e = as_int(stop.e)
        cond = z3.And(idx >= 0, idx < stop_e, idx % step == 0)
        self.loops[str(idx)] = (stop_e, step)
        env[st.target.id] = V(idx, (), stop.dtype, tag=LaneTag(-1, step, idx, "loopvar", (stop_e, step)))
        self.path_cond.append((f"loop_index@{line}", cond))
        self.symbolic_loops += 1
        try:
            if self.exec_block(st.body, env) is not False:
                raise Unsupported("return inside a symbolic loop", line)
        finally:
            self.symbolic_loops -= 1
            self.path_cond.pop()
        for name in assigned | {st.target.id}:
            env.pop(name, None)  # values of "the last iteration" are not modelled
        return None

    def bind(self, target, value, env, line):
        if isinstance(target, ast.Name):
            env[target.id] = value
        elif isinstance(target, ast.Tuple) and isinstance(value, tuple) and len(value) == len(target.elts):
            for t, v in zip(target.elts, value):
                self.bind(t, v, env, line)
        else:
            raise Unsupported(f"assignment target {type(target).__name__}", line)

    def lookup(self, name, env, line):
        if name in env:
            return env[name]
        if name in self.globals:
            return self.globals[name]
        if name in self.dropped:
            raise Unsupported(f"name {name!r} is bound on one path of the if at line {self.dropped[name]} only",
                              line)
        raise Unsupported(f"name {name!r} (not a kernel variable or module constexpr)", line)

    # --- expressions -------------------------------------------------------------------------
    def eval(self, node, env):
        line = getattr(node, "lineno", None)
        if isinstance(node, ast.Constant):
            if node.value is None or isinstance(node.value, (bool, int, str)):
                return node.value
            raise Unsupported(f"constant {node.value!r}", line)
        if isinstance(node, ast.Name):
            return self.lookup(node.id, env, line)
        if isinstance(node, ast.BinOp):
            return self.binop(type(node.op), self.eval(node.left, env), self.eval(node.right, env), line)
        if isinstance(node, ast.UnaryOp):
            v = self.eval(node.operand, env)
            if isinstance(node.op, ast.USub):
                return self.binop(ast.Sub, 0, v, line)
            if isinstance(node.op, (ast.Not, ast.Invert)) and isinstance(v, V) and v.is_bool_expr():
                return V(z3.Not(v.e), v.shape, INT1)
            if isinstance(node.op, ast.Not) and isinstance(v, (bool, int)):
                return not v
            raise Unsupported(f"unary {type(node.op).__name__}", line)
        if isinstance(node, ast.Compare):
            if len(node.ops) != 1:
                raise Unsupported("chained comparison", line)
            left, right = self.eval(node.left, env), self.eval(node.comparators[0], env)
            if isinstance(node.ops[0], (ast.Is, ast.IsNot)):   # `arg is None`: decided at compile time
                if not (left is None or right is None):
                    raise Unsupported("`is` between values other than None", line)
                same = left is right
                return same if isinstance(node.ops[0], ast.Is) else not same
            return self.compare(type(node.ops[0]), left, right, line)
        if isinstance(node, ast.Attribute):
            return self.attribute(self.eval(node.value, env), node.attr, line)
        if isinstance(node, ast.Subscript):
            return self.subscript(self.eval(node.value, env), node.slice, env, line)
        if isinstance(node, (ast.List, ast.Tuple)):
            return tuple(self.eval(e, env) for e in node.elts)
        if isinstance(node, ast.Call):
            return self.call(node, env)
        if isinstance(node, ast.BoolOp):
            return flow.bool_op(self, node, env)
        if isinstance(node, ast.IfExp):
            test = self.eval(node.test, env)
            if isinstance(test, (bool, int)) or test is None:
                return self.eval(node.body if test else node.orelse, env)
            raise Unsupported("conditional expression on a runtime value", line)
        raise Unsupported(f"expression {type(node).__name__}", line)

    def attribute(self, obj, attr, line):
        if isinstance(obj, TL):
            if attr in DTYPES:
                return DTYPES[attr]
            if attr in _TL_FUNCS:
                return ("tl", attr)
            raise Unsupported(f"tl.{attr}", line)
        if isinstance(obj, TritonMod):
            if attr == "cdiv":
                return ("tl", "cdiv")
            raise Unsupported(f"triton.{attr}", line)
        if isinstance(obj, Ptr) and attr == "dtype":
            return PtrDType(obj.tensor.dtype)
        if isinstance(obj, PtrDType) and attr == "element_ty":
            return obj.element_ty
        if isinstance(obj, V) and attr == "dtype":
            return obj.dtype
        if isinstance(obj, V) and attr == "to":
            return ("method_to", obj)
        raise Unsupported(f"attribute .{attr} of {type(obj).__name__}", line)

    def call(self, node, env):
        line = node.lineno
        if _is_name(node.func, "int"):
            v = self.eval(node.args[0], env)
            if isinstance(v, int):
                return int(v)
            raise Unsupported("int() of a symbolic value", line)
        fn = self.eval(node.func, env)
        if fn == ("tl", "store"):
            # The mask first: casts inside the stored value are checked only on active lanes
            # (a value computed for a masked-off lane is discarded).
            kwargs = {k.arg: self.eval(k.value, env) for k in node.keywords}
            mask = kwargs.get("mask")
            prev = self.store_mask
            self.store_mask = mask if isinstance(mask, V) else None
            try:
                args = [self.eval(a, env) for a in node.args]
            finally:
                self.store_mask = prev
            return self.tl_store(line, *args, **kwargs)
        args = [self.eval(a, env) for a in node.args]
        kwargs = {k.arg: self.eval(k.value, env) for k in node.keywords}
        if isinstance(fn, tuple) and fn[0] == "method_to":
            return self.cast(fn[1], args[0] if args else kwargs["dtype"], line)
        if isinstance(fn, tuple) and fn[0] == "tl":
            return getattr(self, "tl_" + fn[1])(line, *args, **kwargs)
        if isinstance(fn, flow.JitFn):
            return flow.inline(self, fn, args, kwargs, line)
        raise Unsupported(f"call of {ast.unparse(node.func)}", line)

    def subscript(self, obj, sl, env, line):
        items = sl.elts if isinstance(sl, ast.Tuple) else [sl]
        idx = []
        for it in items:
            if isinstance(it, ast.Slice) and it.lower is None and it.upper is None and it.step is None:
                idx.append(slice(None))
            elif isinstance(it, ast.Constant) and it.value is None:
                idx.append(None)
            else:
                raise Unsupported(f"subscript {ast.unparse(it)} (only ':' and None)", line)
        if isinstance(obj, Ptr):
            return Ptr(obj.tensor, reshape(obj.off, idx, line))
        if isinstance(obj, V):
            return reshape(obj, idx, line)
        raise Unsupported(f"subscript of {type(obj).__name__}", line)

    # --- operators ---------------------------------------------------------------------------
    def binop(self, op, a, b, line):
        if isinstance(a, (int, bool)) and isinstance(b, (int, bool)):
            return _PY_BINOPS[op](a, b)
        if isinstance(a, Ptr) or isinstance(b, Ptr):
            if op is ast.Add or (op is ast.Sub and isinstance(a, Ptr) and not isinstance(b, Ptr)):
                p, o = (a, b) if isinstance(a, Ptr) else (b, a)
                if isinstance(o, Ptr):
                    raise Unsupported("pointer + pointer", line)
                o = lift(o, INT32)
                if o.is_bool_expr():
                    raise Unsupported("pointer + boolean", line)
                return Ptr(p.tensor, self.binop(op, p.off, o, line))
            raise Unsupported(f"pointer arithmetic {op.__name__}", line)
        av = lift(a, b.dtype if isinstance(b, V) else None)
        bv = lift(b, av.dtype)
        (av2, bv2), shape = broadcast(av, bv)
        x, y = av2.e, bv2.e
        if op in (ast.BitAnd, ast.BitOr, ast.BitXor) and z3.is_bool(x) and z3.is_bool(y):
            e = {ast.BitAnd: z3.And, ast.BitOr: z3.Or, ast.BitXor: z3.Xor}[op](x, y)
            return V(e, shape, INT1)
        dt = promote(av.dtype, bv.dtype)
        self._widen(av2, dt, line)
        self._widen(bv2, dt, line)
        x, y = as_int(x), as_int(y)
        if op in (ast.Add, ast.Sub, ast.Mult):
            e = {ast.Add: x + y, ast.Sub: x - y, ast.Mult: x * y}[op]
            return V(e, shape, dt, True, self._sum_tag(av2, bv2) if op is ast.Add else None)
        if op in (ast.FloorDiv, ast.Mod):
            self.observe(av2, line, "dividend")
            self.observe(bv2, line, "divisor")
            self.raise_ob("divzero", line, y != 0, shape, "divisor is not zero")
            if self._nonneg_div(x, y, shape, line):
                # both operands proved non-negative / positive here: C division is floor division
                return V(x / y if op is ast.FloorDiv else x % y, shape, dt)
            return V(tdiv(x, y) if op is ast.FloorDiv else tmod(x, y), shape, dt)
        if op is ast.LShift:
            self.observe(bv2, line, "shift amount")
            self.raise_ob("wrap", line, z3.And(y >= 0, y < dt.bits), shape, f"shift amount in [0, {dt.bits})")
            shl = self._shl()
            return V(shl(x, y), shape, dt)
        raise Unsupported(f"operator {op.__name__}", line)

    def _widen(self, v, dt, line):
        """A narrower value that may hold a wrapped result (``int32 * int32``) is widened by
        sign extension of its wrapped bits: it must fit its own dtype before the wider
        operation sees it."""
        if v.arith and not v.dtype.is_bool and not dt.is_bool and v.dtype.bits < dt.bits:
            self.observe(v, line, f"{v.dtype} operand widened to {dt}")

    def ask(self, name, hyps, goal):
        """The oracle's proof of ``goal`` under ``hyps`` and the content hypotheses the run
        has introduced so far, or None."""
        return self.oracle(name, {**self.content_hyps, **hyps}, goal)

    def _nonneg_div(self, x, y, shape, line):
        if self.oracle is None:
            return False
        hyps = {label: c for label, c in self.path_cond}
        hyps.update(lane_range(shape))
        proof = self.ask(f"floor-division@{line}", hyps, z3.And(x >= 0, y > 0))
        if proof is None:
            return False
        self.side_proofs.append(proof)
        return True

    def _shl(self):
        f = self.functions.get("shl")
        if f is None:
            f = z3.Function("shl", z3.IntSort(), z3.IntSort(), z3.IntSort())
            self.functions["shl"] = (f, lambda app: {})
        else:
            f = f[0]
        return f

    def _sum_tag(self, a, b):
        """The tag of ``a + b`` (operands broadcast): an arange plus a loop index or ``pid * N``."""
        for lane_v, other in ((a, b), (b, a)):
            tag, otag = lane_v.tag, other.tag
            if tag is not None and tag.axis >= 0 and tag.kind == "arange" and not lane_vars_in(other.e):
                if otag is not None and otag.kind == "loopvar":
                    return LaneTag(tag.axis, tag.size, other.e, "loop", otag.loop)
                if _is_pid_times(other.e, self.pid, tag.size):
                    return LaneTag(tag.axis, tag.size, other.e, "grid")
                return None
        return None

    def compare(self, op, a, b, line):
        if isinstance(a, (int, bool)) and isinstance(b, (int, bool)):
            return _PY_CMPS[op](a, b)
        av = lift(a, b.dtype if isinstance(b, V) else None)
        bv = lift(b, av.dtype)
        (av2, bv2), shape = broadcast(av, bv)
        self.observe(av2, line, "comparison operand")
        self.observe(bv2, line, "comparison operand")
        x, y = av2.e, bv2.e
        if z3.is_bool(x) != z3.is_bool(y):
            x, y = as_int(x), as_int(y)
        e = {ast.Lt: x < y if not z3.is_bool(x) else None, ast.LtE: x <= y if not z3.is_bool(x) else None,
             ast.Gt: x > y if not z3.is_bool(x) else None, ast.GtE: x >= y if not z3.is_bool(x) else None,
             ast.Eq: x == y, ast.NotEq: x != y}.get(op)
        if e is None:
            raise Unsupported(f"comparison {op.__name__}", line)
        if op is ast.Lt:
            self._truncation(av2, bv2, shape, line)
        return V(e, shape, INT1)

    def _truncation(self, lane_v, bound, shape, line):
        """Record ``base + arange(N) < x``; the obligation ``x <= bound`` is raised where the
        comparison is a conjunct of a load/store mask (under the other conjuncts), or, for a
        comparison that never reaches a mask, for every lane at the end of the run."""
        tag = lane_v.tag
        if tag is None or tag.axis < 0:
            return
        if lane_vars_in(bound.e) & {tag.axis}:
            return
        self.trunc_candidates.append((line, tag, as_int(bound.e), list(self.path_cond), shape))

    def _trunc_bound(self, tag_kind, size, base, x):
        if tag_kind == "arange":
            return x <= size, f"mask arange({size}) < x needs x <= {size}"
        if tag_kind == "loop":
            stop, _step = self.loops[str(base)]
            return x <= stop, "a tiled loop's mask c0 + arange < x needs x <= the loop bound (every column visited)"
        g = self.grid[[i for i, p in enumerate(self.pid) if mentions(base, p)][0]]
        return x <= g * size, f"a program-tiled mask pid*{size} + arange < x needs x <= grid*{size}"

    def _mask_truncation(self, mask_e, shape, line):
        parts = conjuncts(mask_e)
        for i, p in enumerate(parts):
            if not (z3.is_app(p) and p.decl().kind() == z3.Z3_OP_LT):
                continue
            lhs, x = p.children()
            k = base = None
            for ax, lane in enumerate(LANES):
                if lhs.eq(lane):
                    k, base, kind = ax, 0, "arange"
                elif z3.is_app(lhs) and lhs.decl().kind() == z3.Z3_OP_ADD and lhs.num_args() == 2:
                    a0, a1 = lhs.children()
                    for bb, ll in ((a0, a1), (a1, a0)):
                        if ll.eq(lane) and not lane_vars_in(bb):
                            if str(bb) in self.loops:
                                k, base, kind = ax, bb, "loop"
                            elif _is_pid_times(bb, self.pid, shape[ax] if ax < len(shape) else -1):
                                k, base, kind = ax, bb, "grid"
                if k is not None:
                    break
            if k is None or k >= len(shape) or (k in lane_vars_in(x)):
                continue
            goal, note = self._trunc_bound(kind, shape[k], base, x)
            others = z3.And(*(parts[:i] + parts[i + 1:])) if len(parts) > 1 else True
            self.trunc_lines.add(_lane_free_key(x, kind))
            self.raise_ob("truncation", line, goal, shape, note + " (where the other mask conjuncts hold)",
                          others)

    def finish_truncation(self):
        for line, tag, x, path, shape in self.trunc_candidates:
            if _lane_free_key(x, tag.kind) in self.trunc_lines:
                continue  # raised where it is a mask conjunct
            goal, note = self._trunc_bound(tag.kind, tag.size, tag.base, x)
            self.obligations.append(Ob("truncation", line, goal, path, tuple(shape), note + " (every lane)", True))

    def cast(self, v, dt, line):
        if isinstance(v, (int, bool)):
            v = lift(v)
        if not isinstance(dt, DType):
            raise Unsupported(f"cast to {dt!r}", line)
        if isinstance(v, Ptr):
            raise Unsupported("pointer cast", line)
        if dt.is_bool:
            out = V(as_bool(v.e), v.shape, INT1, tag=v.tag)
        else:
            e = as_int(v.e)
            active = True
            m = self.store_mask
            if m is not None and m.rank == v.rank and all(a == b or a == 1 for a, b in zip(m.shape, v.shape)):
                active = as_bool(m.e)  # feeds a masked store: only its active lanes matter
            self.observe(v, line, "cast operand", active=active)
            if not v.dtype.is_bool and (dt.bits < v.dtype.bits or dt.signed != v.dtype.signed):
                self.raise_ob("cast", line, z3.And(e >= dt.lo(), e < dt.hi()), v.shape,
                              f"value fits {dt} (cast from {v.dtype})", active)
            out = V(e, v.shape, dt, tag=v.tag)
        return out

    # --- obligations -----------------------------------------------------------------------
    def raise_ob(self, kind, line, goal, shape, note, active=True):
        # A goal that simplifies to True is dropped, except a truncation bound: it stays (proved
        # and witnessed like any other) so that NO-TRUNCATION of a specialization whose only
        # lane mask is trivially bounded (BLOCK_B = NODES = 1 prefix fill) is not empty.
        trivial = z3.is_true(z3.simplify(goal)) if z3.is_expr(goal) else goal is True
        if trivial and kind != "truncation":
            return
        self.obligations.append(Ob(kind, line, goal, list(self.path_cond), tuple(shape), note, active))

    def observe(self, v, line, what, active=True):
        """A value is observed: its mathematical value must fit its dtype (no wrap)."""
        if not isinstance(v, V) or v.dtype.is_bool or z3.is_bool(v.e):
            return
        if not v.arith:
            return  # a leaf (argument, lane, loaded value) or already observed: in range
        key = (v.e.get_id(), line)
        if key in self._seen_wrap:
            return
        self._seen_wrap.add(key)
        e = v.e
        self.raise_ob("wrap", line, z3.And(e >= v.dtype.lo(), e < v.dtype.hi()), v.shape,
                      f"{what} fits {v.dtype} (no wrap)", active)

    # --- triton.language -------------------------------------------------------------------
    def _mem_observe(self, off, line, mask_e, shape):
        # int64 offsets: in bounds (checked per access) and numel < 2^63 imply no wrap
        if off.dtype.bits < 64:
            self.observe(off, line, "pointer offset", active=mask_e)
        self._mask_truncation(mask_e, shape, line)

    def tl_program_id(self, line, axis=0):
        return V(self.pid[axis], (), INT32)

    def tl_num_programs(self, line, axis=0):
        return V(self.grid[axis], (), INT32)

    def tl_arange(self, line, start, end):
        if not (isinstance(start, int) and isinstance(end, int)):
            raise Unsupported("tl.arange with non-constexpr bounds", line)
        n = end - start
        if n == 1:
            return V(z3.IntVal(start), (1,), INT32)
        return V(LANES[0] + start if start else LANES[0], (n,), INT32,
                 tag=LaneTag(0, n, 0, "arange") if start == 0 else None)

    def tl_cdiv(self, line, a, b):
        return self.binop(ast.FloorDiv, self.binop(ast.Sub, self.binop(ast.Add, a, b, line), 1, line), b, line)

    def _shape_arg(self, shape, line):
        shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
        if not all(isinstance(s, int) for s in shape):
            raise Unsupported("block shape that is not constexpr", line)
        return shape

    def tl_zeros(self, line, shape, dtype=None):
        return V(z3.BoolVal(False) if dtype.is_bool else z3.IntVal(0), self._shape_arg(shape, line), dtype)

    def tl_full(self, line, shape, value, dtype=None):
        if not isinstance(value, (int, bool)):
            raise Unsupported("tl.full with a symbolic value", line)
        e = z3.BoolVal(bool(value)) if dtype.is_bool else z3.IntVal(int(value))
        return V(e, self._shape_arg(shape, line), dtype)

    def tl_broadcast_to(self, line, v, shape):
        shape = self._shape_arg(shape, line)
        target = V(z3.IntVal(0), shape, INT32)
        (out, _), s = broadcast(v, target)
        if s != shape:
            raise Unsupported(f"broadcast_to {v.shape} -> {shape}", line)
        return V(out.e, shape, v.dtype, v.arith)

    def tl_where(self, line, c, a, b):
        cv = lift(c)
        av = lift(a, b.dtype if isinstance(b, V) else None)
        bv = lift(b, av.dtype)
        (cv2, av2, bv2), shape = broadcast(cv, av, bv)
        x, y = av2.e, bv2.e
        if z3.is_bool(x) != z3.is_bool(y):
            x, y = as_int(x), as_int(y)
        dt = promote(av.dtype, bv.dtype) if not (isinstance(a, int) or isinstance(b, int)) else \
            (bv.dtype if isinstance(a, int) else av.dtype)
        self._widen(av2, dt, line)
        self._widen(bv2, dt, line)
        return V(z3.If(as_bool(cv2.e), x, y), shape, dt, av2.arith or bv2.arith)

    def tl_device_assert(self, line, cond, msg=""):
        c = lift(cond)
        self.raise_ob("assert", line, as_bool(c.e), c.shape, f"device_assert holds: {msg}")
        if c.shape in ((), (1,)):
            self.path_cond.append((f"device_assert@{line}", as_bool(c.e)))

    def tl_load(self, line, ptr, mask=None, other=None, **kw):
        if kw:
            raise Unsupported(f"tl.load options {sorted(kw)}", line)
        if not isinstance(ptr, Ptr):
            raise Unsupported("tl.load of a non-pointer", line)
        off = ptr.off
        parts = [off]
        if mask is not None:
            parts.append(lift(mask))
        if other is not None:
            parts.append(lift(other, ptr.tensor.dtype))
        vals, shape = broadcast(*parts)
        off_e = vals[0].e
        mask_e = as_bool(vals[1].e) if mask is not None else z3.BoolVal(True)
        self._mem_observe(vals[0], line, mask_e, shape)
        t = ptr.tensor
        if t.written:
            raw = memory.read(self, t, off_e, line)   # the program's own writes, then the caller's contents
        elif t.content is None:
            raw = z3.Function(fresh_name(f"{t.name}_value@{line}"), z3.IntSort(), z3.IntSort())(off_e)
        else:
            raw = t.content(off_e)
        if t.dtype.is_bool and not z3.is_bool(raw):
            raw = raw != 0
        if mask is not None:
            oth = as_int(vals[2].e) if other is not None else z3.Int(fresh_name("undef"))
            if t.dtype.is_bool:
                oth = as_bool(oth)
            e = z3.If(mask_e, raw, oth)
        else:
            e = raw
        self.accesses.append(Access("load", line, t, V(off_e, shape, vals[0].dtype), mask_e,
                                    list(self.path_cond), None, shape, dict(self.cur_env)))
        source = LoadSource(t, off_e, mask_e if mask is not None else None,   # for prefix sums
                            as_int(vals[2].e) if mask is not None and other is not None else None)
        return V(e, shape, t.dtype, load=source)

    def tl_store(self, line, ptr, value, mask=None, **kw):
        if kw:
            raise Unsupported(f"tl.store options {sorted(kw)}", line)
        if not isinstance(ptr, Ptr):
            raise Unsupported("tl.store to a non-pointer", line)
        parts = [ptr.off, lift(value, ptr.tensor.dtype)]
        if mask is not None:
            parts.append(lift(mask))
        vals, shape = broadcast(*parts)
        mask_e = as_bool(vals[2].e) if mask is not None else z3.BoolVal(True)
        self._mem_observe(vals[0], line, mask_e, shape)
        self.observe(vals[1], line, "stored value", active=mask_e)
        t = ptr.tensor
        val = vals[1]
        if not t.dtype.is_bool and not val.dtype.is_bool and (val.dtype.bits > t.dtype.bits
                                                              or val.dtype.signed != t.dtype.signed):
            e = as_int(val.e)
            self.raise_ob("cast", line, z3.And(e >= t.dtype.lo(), e < t.dtype.hi()), shape,
                          f"stored value fits {t.dtype}", mask_e)
        self.accesses.append(Access("store", line, t, V(vals[0].e, shape, vals[0].dtype), mask_e,
                                    list(self.path_cond), val, shape, dict(self.cur_env)))
        memory.write(self, t, vals[0].e, val.e, mask_e, shape)
        return None

    def _reduce(self, line, kind, x, axis):
        x = lift(x)
        if axis is None and x.rank <= 1:
            axis = 0   # reduce over every axis of a rank-1 block
        if not isinstance(axis, int):
            raise Unsupported(f"tl.{kind} without a constexpr axis", line)
        if axis < 0:
            axis += x.rank
        size = x.shape[axis]
        rest_shape = x.shape[:axis] + x.shape[axis + 1:]
        e = x.e
        lk = LANES[axis]
        # result lanes: axis i (< axis) stays, axis i > axis moves to i - 1
        def to_result(expr):
            subs = [(LANES[i], LANES[i - 1]) for i in range(axis + 1, x.rank) if x.shape[i] > 1]
            return z3.substitute(expr, *subs) if subs else expr
        if size == 1:
            return V(to_result(e), rest_shape, x.dtype, x.arith)
        if kind == "sum" and axis == 0:
            exact = memory.prefix_sum(self, x, size, line)   # sum of a masked prefix load
            if exact is not None:
                return V(exact, rest_shape, x.dtype, True)
        if kind == "sum":
            onehot = _match_onehot(e, lk)
            if onehot is not None:
                g, rest_cond, f = onehot
                r = z3.If(z3.And(g >= 0, g < size, z3.substitute(rest_cond, (lk, g))),
                          z3.substitute(f, (lk, g)), z3.IntVal(0) if not z3.is_bool(f) else z3.BoolVal(False))
                arith = x.arith
                if arith and not z3.is_bool(f):
                    # The sum selects one lane's value (or 0): it fits when every selectable lane's
                    # value does.  Observing f once, lane by lane, keeps the no-wrap goal free of g,
                    # which in an unrolled walk nests one selection per step.
                    self.observe(V(f, x.shape, x.dtype, True), line, "one-hot selected value", active=rest_cond)
                    arith = False
                return V(to_result(self.define(r, f"onehot@{line}")), rest_shape, x.dtype, arith)
            if x.rank == 1 and size <= UNROLLED_SUM_LANES:
                # a short rank-1 sum of anything else: the sum of its lanes, written out (each
                # lane must fit first; the sum is then exact modulo 2^bits, so it fits iff observed)
                self.observe(x, line, "summed value")
                return V(z3.Sum([z3.substitute(as_int(e), (lk, z3.IntVal(i))) for i in range(size)]), (),
                         x.dtype, True)
        if kind in ("min", "max"):
            self.observe(x, line, f"{kind} operand")
        # Abstract: R(pid, loop indices, remaining lanes) with valid lemmas only.
        local = [c for c in self.local_consts if mentions(e, c)]
        rest_lanes = [LANES[i] for i in sorted(lane_vars_in(e)) if i != axis]
        argsorts = [z3.IntSort()] * (len(local) + len(rest_lanes))
        base = f"{kind}@{line}"
        R = z3.Function(fresh_name(base), *argsorts, z3.IntSort())
        W = z3.Function(fresh_name(f"argwit@{line}"), *argsorts, z3.IntSort())
        formal = local + rest_lanes
        ebody = as_int(e)
        bitmask = kind == "sum" and _match_bitmask(e, lk, self.functions.get("shl"))

        def schema(app, ebody=ebody, formal=formal, W=W, kind=kind, size=size, lk=lk, bitmask=bitmask):
            actual = list(app.children())
            subs = list(zip(formal, actual))
            out = {}
            if kind in ("min", "max"):
                w = W(*actual) if actual else W()
                out[f"{base}/witness_lane@{app}"] = z3.And(w >= 0, w < size)
                out[f"{base}/attained@{app}"] = app == z3.substitute(ebody, *(subs + [(lk, w)]))
                for lane in LANES[:MAX_RANK]:
                    at = z3.substitute(ebody, *(subs + [(lk, lane)]))
                    rel = app <= at if kind == "min" else app >= at
                    out[f"{base}/bound@{app}@{lane}"] = z3.Implies(z3.And(lane >= 0, lane < size), rel)
            elif bitmask:
                ybound, _ = bitmask
                yb = z3.substitute(ybound, *subs) if ybound is not None else z3.IntVal(size)
                out[f"{base}/bits@{app}"] = z3.And(app >= 0, app < _pow2_table(yb, size))
            return out
        app = R(*formal) if formal else R()
        self.functions[R.name()] = (R, schema)
        # an unrecognised sum stays unconstrained (no lemma is valid for it)
        return V(to_result(app), rest_shape, x.dtype if kind != "sum" or not x.dtype.is_bool else INT32,
                 kind == "sum")

    def define(self, e, base: str):
        """A fresh function ``F(program-local constants, lanes)`` standing for ``e``, with the
        definition ``F(args) == e[args]`` as its schema (label ``def/...``).  The definition is
        an ordinary hypothesis instance, so a query may first be tried without definitions
        (:data:`~.obligations.DEFINITION`): dropping hypotheses is sound, and a nested walk
        then stays one symbol per step instead of a term DEPTH deep."""
        local = [c for c in self.local_consts if mentions(e, c)]
        lanes = [LANES[i] for i in sorted(lane_vars_in(e))]
        formal = local + lanes
        sort = z3.BoolSort() if z3.is_bool(e) else z3.IntSort()
        F = z3.Function(fresh_name(base), *([z3.IntSort()] * len(formal)), sort)

        def schema(app, formal=formal, e=e, name=F.name()):
            body = z3.substitute(e, *zip(formal, app.children())) if formal else e
            return {f"def/{name}@{app}": app == body}
        self.functions[F.name()] = (F, schema)
        return F(*formal) if formal else F()

    def tl_max(self, line, x, axis=None, **kw):
        return self._reduce(line, "max", x, axis)

    def tl_min(self, line, x, axis=None, **kw):
        return self._reduce(line, "min", x, axis)

    def tl_sum(self, line, x, axis=None, **kw):
        return self._reduce(line, "sum", x, axis)

    def tl_static_range(self, line, *a):
        raise Unsupported("tl.static_range outside a for loop", line)

    tl_range = tl_static_range

    def tl_constexpr(self, line, x):
        return x

    def tl_minimum(self, line, a, b, **kw):
        return self._elementwise_pick(line, a, b, "min", kw)

    def tl_maximum(self, line, a, b, **kw):
        return self._elementwise_pick(line, a, b, "max", kw)

    def _elementwise_pick(self, line, a, b, kind, kw):
        if kw and set(kw) - {"propagate_nan"}:
            raise Unsupported(f"tl.{kind}imum options {sorted(kw)}", line)
        if isinstance(a, (int, bool)) and isinstance(b, (int, bool)):
            return min(a, b) if kind == "min" else max(a, b)
        av = lift(a, b.dtype if isinstance(b, V) else None)
        bv = lift(b, av.dtype)
        (av2, bv2), shape = broadcast(av, bv)
        self.observe(av2, line, f"{kind}imum operand")
        self.observe(bv2, line, f"{kind}imum operand")
        x, y = as_int(av2.e), as_int(bv2.e)
        e = z3.If(x <= y, x, y) if kind == "min" else z3.If(x >= y, x, y)
        return V(e, shape, promote(av.dtype, bv.dtype))

    def tl_cast(self, line, x, dtype, **kw):
        if kw:
            raise Unsupported(f"tl.cast options {sorted(kw)}", line)
        return self.cast(x, dtype, line)


UNROLLED_SUM_LANES = 64   # rank-1 sums up to this many lanes are exact sums of their lanes

_TL_FUNCS = {"program_id", "num_programs", "arange", "load", "store", "where", "max", "min", "sum",
             "zeros", "full", "broadcast_to", "device_assert", "static_range", "range", "cdiv", "constexpr",
             "minimum", "maximum", "cast"}

_PY_BINOPS = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b, ast.BitAnd: lambda a, b: a & b,
    ast.BitOr: lambda a, b: a | b, ast.LShift: lambda a, b: a << b, ast.RShift: lambda a, b: a >> b,
}
_PY_CMPS = {ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b,
            ast.GtE: lambda a, b: a >= b, ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b}


def _is_name(node, name):
    return isinstance(node, ast.Name) and node.id == name


def is_jit(node) -> bool:
    """A function decorated ``@triton.jit`` / ``@jit`` (with or without arguments)."""
    for d in node.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        if (isinstance(target, ast.Attribute) and target.attr == "jit") or _is_name(target, "jit"):
            return True
    return False


def _is_tl_attr(node, attr):
    return isinstance(node, ast.Attribute) and node.attr == attr and _is_name(node.value, "tl")


def _is_pid_times(e, pids, size) -> bool:
    """``pid * size`` (in either order)."""
    if not (z3.is_app(e) and e.decl().kind() == z3.Z3_OP_MUL and e.num_args() == 2):
        return False
    a, b = e.children()
    for p, k in ((a, b), (b, a)):
        if any(p.eq(q) for q in pids) and z3.is_int_value(k) and k.as_long() == size:
            return True
    return False


_PLACEHOLDER = z3.Int("lane?")


def _lane_free_key(x, kind):
    return (kind, z3.substitute(x, *[(l, _PLACEHOLDER) for l in LANES]).sexpr())


def _match_onehot(e, lk):
    """``If(And(lane_k == g, rest), f, 0)`` with g free of lane_k -> (g, rest, f)."""
    if not (z3.is_app(e) and e.decl().kind() == z3.Z3_OP_ITE):
        return None
    cond, f, z = e.children()
    if not ((z3.is_int_value(z) and z.as_long() == 0) or z3.is_false(z)):
        return None
    parts = conjuncts(cond)
    for i, p in enumerate(parts):
        if z3.is_eq(p):
            a, b = p.children()
            for l, g in ((a, b), (b, a)):
                if l.eq(lk) and not mentions(g, lk):
                    rest = z3.And(*(parts[:i] + parts[i + 1:])) if len(parts) > 1 else z3.BoolVal(True)
                    return g, rest, f
    return None


def _match_bitmask(e, lk, shl):
    """``If(cond, shl(1, lane_k), 0)``: a bit set per lane; returns (bound y or None, cond)
    where ``lane_k < y`` is a conjunct of cond."""
    if shl is None or not (z3.is_app(e) and e.decl().kind() == z3.Z3_OP_ITE):
        return None
    cond, f, z = e.children()
    if not (z3.is_int_value(z) and z.as_long() == 0):
        return None
    if not (z3.is_app(f) and f.decl().eq(shl[0]) and z3.is_int_value(f.arg(0)) and f.arg(0).as_long() == 1
            and f.arg(1).eq(lk)):
        return None
    y = None
    for p in conjuncts(cond):
        if z3.is_app(p) and p.decl().kind() == z3.Z3_OP_LT and p.arg(0).eq(lk):
            y = p.arg(1)
        if z3.is_not(p) and z3.is_app(p.arg(0)) and p.arg(0).decl().kind() == z3.Z3_OP_LE \
                and p.arg(0).arg(1).eq(lk):
            y = p.arg(0).arg(0)  # not (y <= lane)  ==  lane < y
    return y, cond


def _pow2_table(y, size):
    """``2**min(max(y, 0), size)`` as an If chain (y is a small symbolic count)."""
    out = z3.IntVal(2 ** size)
    for k in range(size - 1, -1, -1):
        out = z3.If(y <= k, z3.IntVal(2 ** k), out)
    return out
