"""Small arithmetic lemmas the kernel obligations cite (each proved once by the trusted
core, then instantiated at the executor's terms so queries stay quantifier free)."""

from __future__ import annotations

from functools import cache

import z3

from specbound.proofs import kernel


@cache
def div_lt():
    """``0 <= q < m*k /\\ k >= 1  =>  q div k < m``."""
    return kernel.check_forall(
        "L-DIV-LT", lambda q, k, m: z3.Implies(z3.And(q >= 0, q < m * k, k >= 1), q / k < m), 3)


@cache
def div_mod_range():
    """``q >= 0 /\\ k >= 1  =>  q = k*(q div k) + q mod k /\\ 0 <= q mod k < k /\\ q div k >= 0``."""
    return kernel.check_forall(
        "L-DIV-MOD-RANGE",
        lambda q, k: z3.Implies(z3.And(q >= 0, k >= 1),
                                z3.And(q == k * (q / k) + q % k, q % k >= 0, q % k < k, q / k >= 0)), 2)


@cache
def mul_lt_mono():
    """``0 <= x < y /\\ z >= 1  =>  x*z < y*z``."""
    return kernel.check_forall(
        "L-MUL-LT-MONO", lambda x, y, z: z3.Implies(z3.And(0 <= x, x < y, z >= 1), x * z < y * z), 3)


def at(lemma, *terms):
    return kernel.instantiate(lemma(), *terms)


@cache
def div_unique():
    """``0 <= r < k  =>  (k*d + r) div k = d /\\ (k*d + r) mod k = r``."""
    return kernel.check_forall(
        "L-DIV-UNIQUE",
        lambda d, r, k: z3.Implies(z3.And(0 <= r, r < k), z3.And((k * d + r) / k == d, (k * d + r) % k == r)), 3)
