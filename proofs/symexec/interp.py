"""The statement walker: execute a ``@triton.jit`` function's Python body symbolically.

The body is read from the kernel's source file with :mod:`ast` (never imported: no torch,
no triton) and walked statement by statement against a Z3 stand-in for
``triton.language`` (tl_builtins.py).  Only the constructs our kernels use are modelled;
everything else raises :class:`~.values.Unsupported` naming the construct and its line.

What one run produces (:class:`~.run_state.ExecResult`): every load and store (tensor,
offset block, mask, path condition, stored value), and the obligations the executor itself
raises on the way (int wrap at the points a wrapped value is observed, truncation of
``arange(N) < x`` masks, division by zero, ``device_assert``).  Bounds, footprint and
race obligations are built from the accesses by :mod:`.obligations`.
"""

from __future__ import annotations

import ast
from typing import Callable

import z3

from specbound.proofs.terms import subterms

from . import arith, floats, flow, truncation
from .kernel_files import torch_free_module
from .run_state import ExecResult, RunState
from .tl_builtins import BUILTINS, store
from .values import (
    DTYPES, FLOATS, INT1, INT64, LaneTag, Ptr, PtrDType, Unsupported, V, as_int, fresh_name, reshape,
)
from specbound import spec as spec_mod


class TL:
    """Marker for the stand-in of ``triton.language`` (attributes resolved by the executor)."""


class TritonMod:
    """Marker for the stand-in of ``triton``."""


class Executor(RunState):
    __slots__ = ("path", "func_name", "constexprs", "scalars", "tensors", "transform", "max_unroll",
                 "globals", "dropped", "helper_depth", "abstract_carried", "symbolic_constexprs")

    def __init__(self, path: str, func_name: str, *, constexprs: dict, scalars: dict,
                 tensors: dict, grid: list, transform: Callable | None = None,
                 max_unroll: int = 64, oracle: Callable | None = None, abstract_carried=(),
                 summarise_loops: bool = False):
        super().__init__(grid, oracle)
        # loops summarised by checked invariants (invariants.py); then a symbolic constexpr may
        # be a trip count: the symbolic loop stands for every trip count
        self.summarise_loops = summarise_loops
        self.path = path
        self.func_name = func_name
        self.constexprs = dict(constexprs)
        self.scalars = scalars
        self.tensors = tensors
        self.transform = transform
        self.max_unroll = max_unroll
        self.globals: dict = {}          # module-level names: tl, triton, constexprs, jit helpers
        self.dropped: dict = {}          # name -> line of the fork after which it is unbound
        self.helper_depth = 0            # depth of inlined @triton.jit helpers (flow.py)
        self.abstract_carried = frozenset(abstract_carried)   # loop-carried names havocked (flow.havoc)
        # A constexpr given as a Z3 value (one proof for all its values) may flow into arithmetic,
        # extents and comparisons, never into a shape or a loop trip count: Triton would compile a
        # different kernel per value there, which one symbolic run does not model.  Shapes refuse a
        # non-int already (tl_builtins); trip counts are checked in exec_for.
        self.symbolic_constexprs = {name: v for name, v in self.constexprs.items() if isinstance(v, V)}

    # --- source -----------------------------------------------------------------------------
    def load_module(self):
        text = open(self.path).read()
        tree = ast.parse(text)
        if self.transform is not None:
            tree = self.transform(tree)
            ast.fix_missing_locations(tree)
        self.globals = {"tl": TL(), "triton": TritonMod()}
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
        truncation.finish(self)
        return self.result()

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
            env[st.target.id] = arith.binop(self, type(st.op), cur, self.eval(st.value, env), line)
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
        if not self.summarise_loops:
            self.refuse_symbolic_constexpr(args, "a loop's trip count", line)
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
        # an entry, not a pop(): a summarised loop in the body leaves its havocs on the path
        entry = self.push_path(f"loop_index@{line}", cond)
        self.symbolic_loops += 1
        self.loop_ranges.append((z3.IntVal(0), stop_e - 1))
        try:
            if self.exec_block(st.body, env) is not False:
                raise Unsupported("return inside a symbolic loop", line)
        finally:
            self.symbolic_loops -= 1
            self.loop_ranges.pop()
            self.drop_path(entry)
        for name in assigned | {st.target.id}:
            env.pop(name, None)  # values of "the last iteration" are not modelled
        return None

    def refuse_symbolic_constexpr(self, values, where: str, line):
        """Unsupported when any of ``values`` depends on a constexpr given as a Z3 value."""
        if not self.symbolic_constexprs:
            return
        consts = {v.e.get_id(): name for name, v in self.symbolic_constexprs.items()}
        terms = [v.e for v in values if isinstance(v, V)]
        for t in subterms(*terms):
            if t.get_id() in consts:
                raise Unsupported(f"the symbolic constexpr {consts[t.get_id()]!r} flows into {where} "
                                  "(one compiled kernel per value: prove it per value)", line)

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
            if isinstance(node.value, float):
                return floats.constant(node.value)
            raise Unsupported(f"constant {node.value!r}", line)
        if isinstance(node, ast.Name):
            return self.lookup(node.id, env, line)
        if isinstance(node, ast.BinOp):
            return arith.binop(self, type(node.op), self.eval(node.left, env), self.eval(node.right, env), line)
        if isinstance(node, ast.UnaryOp):
            v = self.eval(node.operand, env)
            if isinstance(node.op, ast.USub):
                return arith.binop(self, ast.Sub, 0, v, line)
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
            return arith.compare(self, type(node.ops[0]), left, right, line)
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
            return flow.if_exp(self, node, test, env)
        raise Unsupported(f"expression {type(node).__name__}", line)

    def attribute(self, obj, attr, line):
        if isinstance(obj, TL):
            if attr in DTYPES:
                return DTYPES[attr]
            if attr in FLOATS:
                return FLOATS[attr]
            if attr in BUILTINS:
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
        if _is_name(node.func, "float"):   # float("-inf") and the like: an opaque float (floats.py)
            return floats.constant(0.0)
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
            return store(self, line, *args, **kwargs)
        args = [self.eval(a, env) for a in node.args]
        kwargs = {k.arg: self.eval(k.value, env) for k in node.keywords}
        if isinstance(fn, tuple) and fn[0] == "method_to":
            return arith.cast(self, fn[1], args[0] if args else kwargs["dtype"], line)
        if isinstance(fn, tuple) and fn[0] == "tl":
            return BUILTINS[fn[1]](self, line, *args, **kwargs)
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


def _is_name(node, name):
    return isinstance(node, ast.Name) and node.id == name


def is_jit(node) -> bool:
    """A function decorated ``@triton.jit`` / ``@jit``: the kernels' own source loader decides."""
    return torch_free_module("source").is_jit(node)


def _is_tl_attr(node, attr):
    return isinstance(node, ast.Attribute) and node.attr == attr and _is_name(node.value, "tl")
