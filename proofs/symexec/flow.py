"""Control flow of the symbolic executor beyond straight-line code.

* **Early return.**  :meth:`Executor.exec_block` returns the condition under which the
  block returned (``False``: never, ``True``: on every path, else a Z3 Bool); the rest of
  the enclosing block runs under its negation.  Returns are allowed in unrolled loops and
  branches, not inside a symbolic loop (the loop model runs one arbitrary iteration and
  cannot stop the later ones).
* **Forks** (:func:`fork`): a data-dependent scalar ``if`` runs both branches under their
  path condition; variables are merged with ``If``, Python ints of the two branches become
  int32 values (as Triton types them), a name bound in one branch only is dropped (a later
  use is ``Unsupported``), and program-written memory is merged write by write.
* **Symbolic loops** (:func:`symbolic_loop`): ``range(start, stop, step)`` with any scalar
  start/step runs one iteration ``k`` (a fresh constant, ``k >= 0``) at index
  ``start + k*step < stop``; the step must be proved positive.  A loop-carried variable
  must be an induction variable ``x += c`` (``c`` loop invariant): the body runs with
  ``x = x0 + k*c`` and the trusted core proves the invariant inductive (the body's new
  ``x`` equals ``x0 + (k+1)*c``) before the run continues; anything else is ``Unsupported``,
  unless the run summarises its loops (``summarise_loops``): then every other variable the
  body assigns that exists before the loop is summarised by interval invariants the core
  proves inductive (:mod:`.invariants`), a constant negative step counts down, and a read of
  program-written memory in the loop is any value of its dtype.
* **Helpers** (:func:`inline`): a ``@triton.jit`` function of the same file called from the
  kernel is inlined with its defaults; its ``return value`` must be its last statement.
"""

from __future__ import annotations

import ast

import z3

from specbound.proofs import core

from . import invariants
from .values import INT1, INT32, Ptr, Unsupported, V, as_bool, as_int, broadcast, fresh_name, lane_range, lift, promote


class JitFn:
    """A ``@triton.jit`` helper of the kernel's file (inlined at each call)."""

    def __init__(self, node: ast.FunctionDef):
        self.node = node


class MemState:
    """The writes one program made to a tensor, in program order: ``(cond, offset, value)``
    with ``cond`` the mask and the branch conditions since the write was made (a join adds
    the branch's condition).  ``opaque``: a write the model cannot replay (a block store,
    a store in a symbolic loop); a later read of the tensor is then ``Unsupported``."""

    def __init__(self, writes=(), opaque: bool = False):
        self.writes, self.opaque = tuple(writes), opaque


DROPPED = object()   # a name bound on one path only


def r_or(a, b):
    """Disjunction of two return conditions (False / True / Z3 Bool)."""
    if a is False:
        return b
    if b is False or a is True:
        return a
    if b is True:
        return True
    return z3.Or(a, b)


def r_branch(cond, r_then, r_else):
    """``(cond and r_then) or (not cond and r_else)`` for return conditions."""
    if r_then is True and r_else is True:
        return True
    parts = []
    for c, r in ((cond, r_then), (z3.Not(cond), r_else)):
        if r is True:
            parts.append(c)
        elif r is not False:
            parts.append(z3.And(c, r))
    if not parts:
        return False
    return parts[0] if len(parts) == 1 else z3.Or(*parts)


def _as_value(x, like=None):
    if isinstance(x, bool):
        return V(z3.BoolVal(x), (), INT1)
    return V(z3.IntVal(x), (), INT32 if like is None else like)


def merge(cond, a, b, base):
    """The value of a variable after a fork: ``a`` on the ``cond`` path, ``b`` otherwise;
    ``base`` is its value before the fork (for memory states)."""
    if a is b:
        return a
    if a is None or b is None or a is DROPPED or b is DROPPED:
        return DROPPED
    if isinstance(a, MemState) and isinstance(b, MemState):
        if a.opaque or b.opaque:
            return MemState(a.writes, True)
        n = len(base.writes) if isinstance(base, MemState) else 0
        if a.writes[:n] != b.writes[:n]:
            return MemState((), True)
        tail = tuple((z3.And(cond, c), o, v) for c, o, v in a.writes[n:]) + \
            tuple((z3.And(z3.Not(cond), c), o, v) for c, o, v in b.writes[n:])
        return MemState(a.writes[:n] + tail)
    if isinstance(a, Ptr) and isinstance(b, Ptr):
        if a.tensor is not b.tensor:
            return DROPPED
        off = merge(cond, a.off, b.off, None)
        return DROPPED if off is DROPPED else Ptr(a.tensor, off)
    if isinstance(a, (bool, int)) and isinstance(b, (bool, int)):
        if a == b and type(a) is type(b):
            return a
        both_bool = isinstance(a, bool) and isinstance(b, bool)
        a, b = (_as_value(a), _as_value(b)) if both_bool else (_as_value(int(a)), _as_value(int(b)))
    elif isinstance(a, (bool, int)) and isinstance(b, V):
        a = _as_value(a, b.dtype if not b.dtype.is_bool else None)
    elif isinstance(b, (bool, int)) and isinstance(a, V):
        b = _as_value(b, a.dtype if not a.dtype.is_bool else None)
    if isinstance(a, V) and isinstance(b, V) and a.shape == b.shape:
        x, y = a.e, b.e
        if z3.is_bool(x) != z3.is_bool(y):
            x, y = as_int(x), as_int(y)
        return V(z3.If(cond, x, y), a.shape, promote(a.dtype, b.dtype), a.arith or b.arith)
    return DROPPED


def fork(ex, st, test, env):
    """Run both branches of a data-dependent scalar ``if``; returns the return condition."""
    if not isinstance(test, V) or test.shape not in ((), (1,)):
        raise Unsupported("if on a block value", st.lineno)
    cond = as_bool(test.e)
    results, mems, rets = [], [], []
    mem0 = dict(ex.mem)
    for branch, c in ((st.body, cond), (st.orelse, z3.Not(cond))):
        e2 = dict(env)
        ex.mem = dict(mem0)
        entry = ex.push_path(f"if@{st.lineno}", c)
        try:
            rets.append(ex.exec_block(branch, e2))
        finally:
            ex.drop_path(entry)
        results.append(e2)
        mems.append(ex.mem)
    ret = r_branch(cond, rets[0], rets[1])
    if rets[0] is True or rets[1] is True:
        if ret is not True:   # only the other branch goes on
            live = 1 if rets[0] is True else 0
            env.clear()
            env.update(results[live])
            ex.mem = mems[live]
        return ret
    for store, pair, before in ((env, results, dict(env)), (None, mems, mem0)):
        target = store if store is not None else {}
        for name in set(pair[0]) | set(pair[1]):
            if store is None:   # a tensor one branch did not write: no writes of its own
                value = merge(cond, pair[0].get(name, MemState()), pair[1].get(name, MemState()),
                              before.get(name, MemState()))
            else:
                value = merge(cond, pair[0].get(name), pair[1].get(name), before.get(name))
            if value is DROPPED:
                target.pop(name, None)
                if store is not None:
                    ex.dropped[name] = st.lineno
            else:
                target[name] = value
        if store is None:
            ex.mem = target
    return ret


# --- loops --------------------------------------------------------------------------------

def _first_use_is_load(body, name) -> bool:
    """Whether ``name`` is read before it is written in one pass over ``body`` (statement
    order; in an assignment the value is evaluated before the target is bound)."""
    def walk(stmts):
        for s in stmts:
            if isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                value = s.value if s.value is not None else ast.Constant(None)
                if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(value)):
                    return True
                if isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name) and s.target.id == name:
                    return True
                targets = s.targets if isinstance(s, ast.Assign) else [s.target]
                if any(isinstance(n, ast.Name) and n.id == name for t in targets for n in ast.walk(t)):
                    return False
            elif isinstance(s, (ast.If, ast.For)):
                head = s.test if isinstance(s, ast.If) else s.iter
                if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(head)):
                    return True
                for part in (s.body, s.orelse):
                    r = walk(part)
                    if r is not None:
                        return r   # conservative: a use in a branch decides
            else:
                if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(s)):
                    return True
        return None
    return bool(walk(body))


def _increment(body, name):
    """The loop-invariant increment ``c`` of ``name`` when the body's only write of it is a
    top-level ``name += c`` / ``name = name + c`` (else None)."""
    found = []
    for s in body:
        if isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name) and s.target.id == name \
                and isinstance(s.op, ast.Add):
            found.append(s.value)
        elif isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name) \
                and s.targets[0].id == name and isinstance(s.value, ast.BinOp) and isinstance(s.value.op, ast.Add):
            left, right = s.value.left, s.value.right
            if isinstance(left, ast.Name) and left.id == name:
                found.append(right)
            elif isinstance(right, ast.Name) and right.id == name:
                found.append(left)
            else:
                return None
    writes = [n for s in body for n in ast.walk(s)
              if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)]
    return found[0] if len(found) == 1 and len(writes) == 1 else None


def _scalar_term(x, what, line):
    if isinstance(x, bool):
        raise Unsupported(f"loop {what} is a boolean", line)
    if isinstance(x, int):
        return z3.IntVal(x), INT32
    if isinstance(x, V) and x.shape == ():
        return as_int(x.e), x.dtype
    raise Unsupported(f"loop {what} that is not a scalar", line)


def symbolic_loop(ex, st, env, start, stop, step):
    """One arbitrary iteration ``k`` of ``for i in range(start, stop, step)`` with induction
    variables; see the module docstring."""
    line = st.lineno
    assigned = {n.id for node in st.body for n in ast.walk(node)
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    carried = sorted(a for a in assigned if a in env and _first_use_is_load(st.body, a))
    start_e, _ = _scalar_term(start, "start", line)
    stop_e, stop_dt = _scalar_term(stop, "bound", line)
    step_e, _ = _scalar_term(step, "step", line)
    for what, v in (("start", start), ("bound", stop), ("step", step)):
        if isinstance(v, V):
            ex.observe(v, line, f"loop {what}")
    # a constant negative step counts down (summarised runs only: range(n - 1, 0, -1))
    down = ex.summarise_loops and isinstance(step, int) and not isinstance(step, bool) and step < 0
    if not down:
        ex.raise_ob("loopstep", line, step_e > 0, (), "the loop step is positive (else range() would not "
                    "run the iterations the model runs)")
    k = z3.Int(fresh_name(f"iter@{line}"))
    ex.local_consts.append(k)
    idx = start_e + k * step_e
    in_range = idx > stop_e if down else idx < stop_e
    # the index after the last iteration is computed by the loop in the bound's dtype
    if down:
        ex.raise_ob("wrap", line, z3.Implies(z3.And(k >= 0, in_range), idx + step_e >= stop_dt.lo()), (),
                    f"the loop index plus its step fits {stop_dt} (no wrap in the loop's own decrement)")
    else:
        ex.raise_ob("wrap", line, z3.Implies(z3.And(k >= 0, in_range), idx + step_e < stop_dt.hi()), (),
                    f"the loop index plus its step fits {stop_dt} (no wrap in the loop's own increment)")
    increments = {}
    abstract = sorted(a for a in assigned if a in env and a in ex.abstract_carried)
    carried = [name for name in carried if name not in abstract]
    summarised = []
    if ex.summarise_loops:   # every other variable of the loop that exists before it (invariants.py)
        carried = [name for name in carried if _increment(st.body, name) is not None]
        summarised = sorted(a for a in assigned if a in env and a not in abstract and a not in carried)
    for name in abstract:
        env[name] = havoc(ex, env[name], name, line)
    for name in carried:
        node = _increment(st.body, name)
        if node is None:
            raise Unsupported(f"loop-carried variable {name!r} is not an induction variable "
                              f"({name} += loop-invariant)", line)
        if any(isinstance(n, ast.Name) and n.id in assigned for n in ast.walk(node)):
            raise Unsupported(f"increment of {name!r} is not loop invariant", line)
        increments[name] = ex.eval(node, env)
    x0 = {name: env[name] for name in carried}
    x0_abstract = {name: env[name] for name in abstract}
    for name in carried:
        env[name] = _closed_form(ex, x0[name], increments[name], k, line)
    target = st.target.id
    env[target] = V(idx, (), stop_dt)
    mem0 = dict(ex.mem)
    # the smallest and largest index (the candidates' bounds of invariants.py)
    ex.loop_ranges.append((stop_e + 1, start_e) if down else (start_e, stop_e - 1))

    def body():
        r = ex.exec_block(st.body, env)
        if r is not False:
            raise Unsupported("return inside a symbolic loop", line)
        for name in carried:
            _prove_inductive(ex, name, env[name], x0[name], increments[name], k, line)

    ex.symbolic_loops += 1
    try:
        if summarised:
            cands, dts = invariants.summarise(ex, st, env, summarised, k, list(ex.loop_ranges),
                                              (f"loop_iter@{line}", z3.And(k >= 0, in_range)), body)
        else:
            entry = ex.push_path(f"loop_iter@{line}", z3.And(k >= 0, in_range))
            try:
                body()
            finally:
                ex.drop_path(entry)
    finally:
        ex.symbolic_loops -= 1
        ex.loop_ranges.pop()
    for name, state in list(ex.mem.items()):
        if state is not mem0.get(name):   # what the iterations wrote is not replayed after the loop
            ex.mem[name] = MemState(state.writes, True)
    for name in assigned | {target}:
        env.pop(name, None)  # values of "the last iteration" are not modelled
    for name in abstract:
        env[name] = havoc(ex, x0_abstract[name], name, line)
    if summarised:
        invariants.after_loop(ex, env, summarised, cands, dts, line, _trips(start_e, stop_e, step))


def _trips(start, stop, step):
    """How many iterations ``range(start, stop, step)`` runs, for a constant step (else None)."""
    if isinstance(step, bool) or not isinstance(step, int) or step == 0:
        return None
    span, s = (start - stop, -step) if step < 0 else (stop - start, step)
    return z3.If(span > 0, (span + s - 1) / s, 0)


def havoc(ex, x, name, line):
    """A fresh value of ``x``'s kind (any value of its dtype): what an abstracted loop-carried
    variable holds at an arbitrary iteration and after the loop.  Sound for every property
    that holds whatever the variable's value (its uses only guard or pick stored values)."""
    if isinstance(x, bool) or (isinstance(x, V) and x.shape == () and (x.dtype.is_bool or z3.is_bool(x.e))):
        return V(z3.Bool(fresh_name(f"{name}@{line}")), (), INT1)
    if isinstance(x, V) and x.shape == () and x.dtype.is_float:
        return V(z3.Int(fresh_name(f"{name}@{line}")), (), x.dtype)   # an opaque float (floats.py)
    if isinstance(x, int) or (isinstance(x, V) and x.shape == ()):
        dt = INT32 if isinstance(x, int) else x.dtype
        v = z3.Int(fresh_name(f"{name}@{line}"))
        ex.local_consts.append(v)
        ex.path_cond.append((f"havoc_{name}@{line}#{v}", z3.And(v >= dt.lo(), v < dt.hi())))
        return V(v, (), dt)
    raise Unsupported(f"loop-carried variable {name!r} of a kind that cannot be abstracted", line)


def if_exp(ex, node, test, env):
    """``a if c else b`` on a runtime scalar ``c``: each side is evaluated under its own path
    condition (a load on one side is an access only there) and the two are merged."""
    if not isinstance(test, V) or test.shape not in ((), (1,)):
        raise Unsupported("conditional expression on a block value", node.lineno)
    cond = as_bool(test.e)
    sides = []
    for expr, c in ((node.body, cond), (node.orelse, z3.Not(cond))):
        entry = ex.push_path(f"if@{node.lineno}", c)
        try:
            sides.append(ex.eval(expr, env))
        finally:
            ex.drop_path(entry)
    value = merge(cond, sides[0], sides[1], None)
    if value is DROPPED:
        raise Unsupported("conditional expression whose sides cannot be merged", node.lineno)
    return value


def _closed_form(ex, x0, c, k, line):
    if isinstance(x0, Ptr):
        off = _closed_form(ex, x0.off, c, k, line)
        return Ptr(x0.tensor, off)
    base = lift(x0)
    inc = lift(c, base.dtype)
    (b2, i2), shape = broadcast(base, inc)
    return V(as_int(b2.e) + k * as_int(i2.e), shape, promote(base.dtype, inc.dtype), True)


def _prove_inductive(ex, name, after, x0, c, k, line):
    """The core proves ``x(k+1) == x0 + (k+1)*c`` from the body's own update: the closed
    form the body ran with is an inductive invariant (base case: ``x(0) == x0``)."""
    want = _closed_form(ex, x0, c, k + 1, line)
    got = after
    if isinstance(want, Ptr):
        if not isinstance(got, Ptr) or got.tensor is not want.tensor:
            raise Unsupported(f"loop-carried pointer {name!r} changes tensor", line)
        want, got = want.off, got.off
    if not isinstance(got, V) or got.shape != want.shape:
        raise Unsupported(f"loop-carried variable {name!r} changes shape or kind", line)
    hyps = {label: cond for label, cond in ex.path_cond}
    hyps.update(lane_range(want.shape))
    try:
        proof = core.check(f"loop-invariant@{line}:{name}", as_int(got.e) == as_int(want.e), hyps=hyps,
                             rlimit=2_000_000)
    except (core.Refuted, core.Unknown) as exc:
        raise Unsupported(f"loop-carried variable {name!r}: x0 + k*c is not an inductive invariant "
                          f"({type(exc).__name__})", line) from None
    ex.invariant_proofs.append(proof)


# --- helpers --------------------------------------------------------------------------------

def inline(ex, fn: JitFn, args, kwargs, line):
    """Inline a ``@triton.jit`` helper: bind arguments (defaults from the source), run the
    body in its own scope, return the value of its final ``return``."""
    node = fn.node
    params = [a.arg for a in (*node.args.posonlyargs, *node.args.args)]
    if node.args.vararg or node.args.kwarg or node.args.kwonlyargs:
        raise Unsupported(f"helper {node.name} with *args/**kwargs/keyword-only parameters", line)
    if len(args) > len(params):
        raise Unsupported(f"helper {node.name}: too many arguments", line)
    scope = dict(zip(params, args))
    defaults = dict(zip(params[len(params) - len(node.args.defaults):], node.args.defaults))
    for key, value in kwargs.items():
        if key not in params or key in scope:
            raise Unsupported(f"helper {node.name}: bad keyword {key!r}", line)
        scope[key] = value
    for p in params:
        if p not in scope:
            if p not in defaults:
                raise Unsupported(f"helper {node.name}: no value for {p!r}", line)
            scope[p] = ex.eval(defaults[p], {})
    if ex.helper_depth >= 8:
        raise Unsupported(f"helper {node.name}: call depth above 8", line)
    body = list(node.body)
    last = body[-1] if body else None
    if isinstance(last, ast.Return):
        body = body[:-1]
    for n in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(n, ast.Return):
            raise Unsupported(f"helper {node.name}: return other than its last statement", n.lineno)
    ex.helper_depth += 1
    try:
        r = ex.exec_block(body, scope)
        if r is not False:
            raise Unsupported(f"helper {node.name}: return inside its body", line)
        if isinstance(last, ast.Return) and last.value is not None:
            return ex.eval(last.value, scope)
        return None
    finally:
        ex.helper_depth -= 1


def bool_op(ex, node, env):
    """``and`` / ``or`` as Triton's code generator does: a constexpr operand short-circuits
    (or drops out), tensor operands are combined without short-circuit."""
    is_and = isinstance(node.op, ast.And)
    terms = []
    for sub in node.values:
        v = ex.eval(sub, env)
        if isinstance(v, (bool, int)) or v is None:
            if is_and and not v:
                return v
            if not is_and and v:
                return v
            continue
        if not isinstance(v, V):
            raise Unsupported(f"boolean operator on {type(v).__name__}", node.lineno)
        terms.append(v)
    if not terms:
        return is_and
    if len(terms) == 1:
        return terms[0]
    vals, shape = broadcast(*terms)
    parts = [as_bool(v.e) for v in vals]
    return V(z3.And(*parts) if is_and else z3.Or(*parts), shape, INT1)
