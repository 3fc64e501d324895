"""Loop summaries by checked interval invariants (Houdini): what a symbolic loop knows of a
loop-carried variable that is not an induction variable.

Used when a run opts in (``Executor(summarise_loops=True)``).  For each variable assigned in
the loop body that exists before the loop (and is not an induction variable), candidate
invariants are guessed: ``x >= b`` and ``x <= b`` for ``b`` among 0, 1, the variable's value
before the loop and the first/last index (each -1, +0, +1) of every enclosing loop, plus
``x <= x0 + k`` and ``x >= x0 - k`` at iteration ``k`` (a counter that moves by at most one
per iteration).  Each candidate must hold at ``k = 0`` (initiation, proved by the core under
the path before the loop and the run's preconditions) and be preserved by one arbitrary iteration (consecution: the body
runs with ``x`` a fresh value of its dtype satisfying every surviving candidate at ``k``, and
the core proves the candidate at ``k + 1`` of the body's new ``x``).  A candidate that fails
either is dropped and the body runs again from the state before it (Houdini); what survives
is an inductive invariant, so every iteration's ``x`` satisfies it and so does the value after
the loop (the ``k``-free candidates are kept there).  Nothing is assumed unproved: the proofs
are the run's ``invariant_proofs``.
"""

from __future__ import annotations

import z3

from specbound.proofs import core

from .values import INT1, INT32, Unsupported, V, as_int, fresh_name, lane_range

RLIMIT = 500_000
_LISTS = ("accesses", "obligations", "local_consts", "side_proofs", "invariant_proofs", "trunc_candidates")
_DICTS = ("functions", "content_hyps", "loops", "mem", "initial_contents", "dropped")
_SETS = ("seen_wrap", "trunc_raised")


def _dtype_of(x, line, name):
    if isinstance(x, bool) or (isinstance(x, V) and (x.dtype.is_bool or z3.is_bool(x.e))):
        return INT1
    if isinstance(x, int):
        return INT32
    if isinstance(x, V) and x.shape == () and not x.dtype.is_float:
        return x.dtype
    raise Unsupported(f"loop-carried variable {name!r} of a kind the loop summary does not model", line)


def _term(x):
    if isinstance(x, bool):
        return z3.IntVal(int(x))
    if isinstance(x, int):
        return z3.IntVal(x)
    return as_int(x.e)


def candidates(x0, ranges):
    """``(text, f(x, k))`` candidates; ``ranges``: ``(first, last)`` index terms of the
    enclosing loops, innermost last."""
    bounds = [("0", z3.IntVal(0)), ("1", z3.IntVal(1)), ("x0", x0)]
    for depth, (lo, hi) in enumerate(ranges):
        for d in (-1, 0, 1):
            bounds += [(f"first{depth}{d:+d}", lo + d), (f"last{depth}{d:+d}", hi + d)]
    out = []
    for text, b in bounds:
        out.append((f"x >= {text}", lambda x, k, b=b: x >= b, False))
        out.append((f"x <= {text}", lambda x, k, b=b: x <= b, False))
    out.append(("x <= x0 + k", lambda x, k: x <= x0 + k, True))
    out.append(("x >= x0 - k", lambda x, k: x >= x0 - k, True))
    return out


def _hyps(ex, shape=()):
    h = {label: c for label, c in ex.path_cond}
    h.update(lane_range(shape))
    return h


def _holds(ex, name, goal) -> object:
    """The core's proof of ``goal`` under the path (and, through the run's oracle, its
    preconditions), or None."""
    if ex.oracle is not None:
        return ex.ask(name, _hyps(ex), goal)
    try:
        return core.check(name, goal, hyps=_hyps(ex), rlimit=RLIMIT)
    except (core.Refuted, core.Unknown):
        return None


def _snapshot(ex, env):
    return ({a: len(getattr(ex, a)) for a in _LISTS}, {a: dict(getattr(ex, a)) for a in _DICTS},
            {a: set(getattr(ex, a)) for a in _SETS}, list(ex.path_cond), dict(env), ex.cur_env)


def _restore(ex, env, snap):
    lists, dicts, sets, path, env0, cur_env = snap
    for a, n in lists.items():
        del getattr(ex, a)[n:]
    for a, d in dicts.items():
        setattr(ex, a, dict(d))
    for a, s in sets.items():
        setattr(ex, a, set(s))
    ex.path_cond[:] = path
    env.clear()
    env.update(env0)
    ex.cur_env = cur_env


def _fresh(ex, name, dt, line):
    v = z3.Int(fresh_name(f"{name}@{line}"))
    ex.local_consts.append(v)
    lo, hi = (0, 2) if dt is INT1 else (dt.lo(), dt.hi())
    ex.path_cond.append((f"havoc_{name}@{line}#{v}", z3.And(v >= lo, v < hi)))
    return v


def _value(v, dt):
    return V(v != 0, (), INT1) if dt is INT1 else V(v, (), dt)


def summarise(ex, st, env, names, k, ranges, iteration, run_body):
    """Initiation under the path before the loop; then the body (``run_body()``) under the
    path entry ``iteration`` (iteration ``k`` runs) with the variables ``names`` summarised,
    again from the state before it while a candidate fails.  Returns the surviving candidates
    and the variables' dtypes (for :func:`after_loop`)."""
    line = st.lineno
    x0 = {n: env[n] for n in names}
    dts = {n: _dtype_of(x0[n], line, n) for n in names}
    cands = {}
    for n in names:
        t0 = _term(x0[n])
        kept = []
        for text, f, rel in candidates(t0, ranges):
            proof = _holds(ex, f"loop-invariant-init@{line}:{n}:{text}", f(t0, z3.IntVal(0)))
            if proof is not None:
                kept.append((text, f, rel, proof))
        cands[n] = kept
    entry = ex.push_path(*iteration)
    try:
        cands, proofs = _houdini(ex, env, names, k, dts, cands, run_body, line)
    finally:
        ex.drop_path(entry)
    ex.invariant_proofs.extend(proofs + [c[3] for cs in cands.values() for c in cs])
    return cands, dts


def _houdini(ex, env, names, k, dts, cands, run_body, line):
    snap = _snapshot(ex, env)
    while True:
        vals = {}
        for n in names:
            v = _fresh(ex, n, dts[n], line)
            vals[n] = v
            for text, f, _rel, _p in cands[n]:
                ex.path_cond.append((f"invariant@{line}:{n}:{text}#{v}", f(v, k)))
            env[n] = _value(v, dts[n])
        run_body()
        failed, proofs = set(), []
        for n in names:
            after = env.get(n)
            if after is None or _dtype_of(after, line, n) is not dts[n]:
                raise Unsupported(f"loop-carried variable {n!r} changes kind or dtype in the loop", line)
            # the invariants are about the mathematical value: it must be the stored one (no wrap)
            ex.observe(after, line, f"the loop-carried {n}")
            t = _term(after)
            for text, f, _rel, _p in cands[n]:
                proof = _holds(ex, f"loop-invariant-step@{line}:{n}:{text}", f(t, k + 1))
                if proof is None:
                    failed.add((n, text))
                else:
                    proofs.append(proof)
        if not failed:
            return cands, proofs
        _restore(ex, env, snap)
        cands = {n: [c for c in cs if (n, c[0]) not in failed] for n, cs in cands.items()}


def after_loop(ex, env, names, cands, dts, line, trips=None):
    """Each summarised variable after the loop: a fresh value of its dtype satisfying its
    ``k``-free invariants (they hold before the first iteration and after every one) and, when
    the trip count ``trips`` is known, the others at ``k = trips`` (initiation when the loop
    does not run, else consecution of its last iteration ``k = trips - 1``)."""
    for n in names:
        v = _fresh(ex, n, dts[n], line)
        for text, f, rel, _p in cands[n]:
            if not rel or trips is not None:
                ex.path_cond.append((f"invariant_after@{line}:{n}:{text}#{v}", f(v, trips)))
        env[n] = _value(v, dts[n])
