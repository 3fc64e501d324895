"""A claim that one of sglang's pure helpers agrees with the spec, and its check: the
helper is run on Z3 terms path by path (:mod:`specbound.audit.helper_paths`), each return path compared
with the spec's value and each raising path with where raising is allowed, every
comparison refuted by Z3 or answered with a counterexample; a helper whose code cannot
take Z3 terms is evaluated on a dense grid instead, and the method says "grid".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import z3

from specbound.audit.report import DIVERGED, ERROR, MATCHED
from specbound.audit import helper_paths


def _format_conditions(conds) -> str:
    return ", ".join(str(z3.simplify(c)) for c in conds) or "always"


def harness_failure(e: BaseException) -> bool:
    """An exception that says the audit's own stand-ins do not fit this sglang (a record
    without the field the helper reads, a global the namespace lacks, a call with other
    parameters): an ``error`` row, never a divergence blamed on sglang."""
    return isinstance(e, (AttributeError, NameError, ImportError, TypeError))


@dataclass
class Claim:
    """``call(*vars)`` must equal ``expected(*vars)`` wherever ``pre(*vars)`` holds; where
    ``may_raise(*vars)`` holds the helper may raise instead (and must, if ``must_raise``)."""
    variables: Sequence[z3.ArithRef]
    pre: Callable[..., list]
    call: Callable[..., Any]
    expected: Callable[..., Any]
    may_raise: Callable[..., Any] | None = None
    grid: dict[str, range] | None = None


def _equal(a, b):
    if isinstance(a, tuple) or isinstance(b, tuple):
        if not (isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b)):
            return False
        parts = [_equal(x, y) for x, y in zip(a, b)]
        return z3.And(*[p if isinstance(p, z3.ExprRef) else z3.BoolVal(bool(p)) for p in parts])
    if a is None or b is None:
        return a is b
    return helper_paths.equal(a, b)


def _as_z3_bool(v):
    return v if isinstance(v, z3.ExprRef) else z3.BoolVal(bool(v))


def run_claim(hook, claim: Claim, name: str) -> tuple[str, str, str, dict | None]:
    """(status, method, detail, counterexample); ``name`` names the core's queries.  ``matched``
    by ``z3`` only when the core proved every path's comparison."""
    vs = list(claim.variables)
    pre = claim.pre(*vs)
    expl = helper_paths.explore(hook, lambda: claim.call(*vs), pre)
    if expl.unsupported is None:
        n_ret = n_raise = 0
        guards = []
        for path in expl.paths:
            if path.returned:
                n_ret += 1
                try:
                    same = _as_z3_bool(_equal(path.value, claim.expected(*vs)))
                except Exception as e:  # noqa: BLE001 - a value the audit cannot compare
                    return ERROR, "z3", (f"the audit cannot compare the returned {path.value!r} with the spec's "
                                         f"value ({type(e).__name__}: {e})"), None
                v = helper_paths.prove(f"{name}/return path {n_ret}", same, pre, vs, path.condition)
                if v.status == "counterexample":
                    got = v.model and _eval_at(path.value, v.model, vs)
                    want = v.model and _eval_at(claim.expected(*vs), v.model, vs)
                    return (DIVERGED, "z3", f"sglang returns {got}, the spec {want} "
                            f"(path: {_format_conditions(path.condition)})", v.model)
            else:
                n_raise += 1
                allowed = claim.may_raise(*vs) if claim.may_raise else z3.BoolVal(False)
                v = helper_paths.prove(f"{name}/raising path {n_raise}", _as_z3_bool(allowed), pre, vs,
                                       path.condition)
                if v.status == "counterexample":
                    return (DIVERGED, "z3", f"raises {path.describe_error()} on an input the spec "
                            f"accepts", v.model)
                cond = _format_conditions(path.condition)
                guards.append(f"raises {type(path.error).__name__} "
                              + (f"when {cond}" if path.condition else "for every input"))
            if v.status == "unknown":
                return ERROR, "z3", f"solver returned unknown (rlimit {helper_paths.RLIMIT})", None
        detail = f"{n_ret} return path(s) equal to the spec for all inputs"
        if guards:
            detail += "; " + "; ".join(guards)
        if expl.truncated:
            return ERROR, "z3", detail + f"; more than {helper_paths.MAX_PATHS} paths (not all explored)", None
        return MATCHED, "z3", detail, None
    # Grid fallback.
    if not claim.grid:
        return ERROR, "-", f"not symbolic ({expl.unsupported}) and no grid defined", None
    points = helper_paths.grid(claim.grid)
    for p in points:
        args = [p[str(v)] for v in vs]
        if not all(bool(c) for c in claim.pre(*args)):
            continue
        try:
            got = claim.call(*args)
        except Exception as e:  # noqa: BLE001
            if claim.may_raise and bool(claim.may_raise(*args)):
                continue
            if harness_failure(e):
                return (ERROR, f"grid ({len(points)} points)", f"the audit's stand-ins failed, not sglang: "
                        f"{type(e).__name__}: {e} at {p}", None)
            return (DIVERGED, f"grid ({len(points)} points)", f"raises {type(e).__name__}: {e}; "
                    f"not symbolic: {expl.unsupported}", p)
        want = claim.expected(*args)
        if not bool(_equal(got, want)):
            return (DIVERGED, f"grid ({len(points)} points)", f"sglang returns {got}, the spec {want}; "
                    f"not symbolic: {expl.unsupported}", p)
    return (MATCHED, f"grid ({len(points)} points)",
            f"equal on every grid point (not symbolic: {expl.unsupported})", None)


def _eval_at(value, model: dict, vs):
    sub = [(v, z3.IntVal(model[str(v)])) for v in vs if isinstance(model.get(str(v)), int)]
    if isinstance(value, tuple):
        return tuple(_eval_at(x, model, vs) for x in value)
    if isinstance(value, z3.ExprRef):
        r = z3.simplify(z3.substitute(value, *sub))
        if isinstance(r, z3.IntNumRef):
            return r.as_long()
        if z3.is_true(r) or z3.is_false(r):
            return z3.is_true(r)
        return r
    return value
