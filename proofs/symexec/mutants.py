"""The one registry of kernel mutants: each id names one planted change to one of our kernels
(an AST rewrite of its source, or a host-side sizing with the kernel untouched) and one
replay recipe.

The mutants are declared next to everything else about their kernel (``MUTANTS`` of each
kernel module in :mod:`.verifiers`); this module collects them, one id each.  The planted
change itself is :class:`.plant.Plant`.  The same planted change serves both users:

* the symbolic refutation (:func:`.theorems.refute`) executes the rewritten source
  symbolically and replays its counterexample on :meth:`Plant.kernel` (the rewritten source
  compiled by :mod:`specbound.kernels.source`) through the kernel module's concrete
  launch (``VERIFIER.replay``), expecting one of ``expect``;
* the fuzz (``specbound.fuzz.replay``) launches :meth:`Plant.kernel` on the counterexample
  of the spec theorem ``fuzz_theorem`` whose mutant of the same id models the same bug at
  the formula level.  A mutant the fuzz does not replay says why in ``fuzz_skip``.

Ids are stable: they are listed in docs/kernel-proofs.md and docs/invariants.md.
"""

from __future__ import annotations

from . import verifiers
from .plant import KernelMutant, Plant, PlantFailed, build_kernel, function_source, kernel_of

# the registry's public face: the records, and the plant machinery its users call
__all__ = ["MUTANTS", "BY_ID", "KIND_KERNEL", "of_kind", "get", "fuzzed", "KernelMutant", "Plant", "PlantFailed",
           "build_kernel", "function_source", "kernel_of"]

MUTANTS = tuple(m for v in verifiers.VERIFIERS for m in v.mutants)
# kind -> (kernels module, Triton function), from the registered kernel modules
KIND_KERNEL = {v.kind: (v.module, v.func) for v in verifiers.VERIFIERS}

BY_ID = {m.id: m for m in MUTANTS}
assert len(BY_ID) == len(MUTANTS), "duplicate kernel mutant id"


def check_layouts(mutants=MUTANTS) -> None:
    """A mutant's ``layouts`` must name kernel names its kernel's specializations have: one
    that names none would run nowhere, which must never read as covered."""
    names = {v.kind: {sp.name for sp in v.all_specs()} for v in verifiers.VERIFIERS}
    for m in mutants:
        unknown = set(m.layouts) - names[m.kind]
        if unknown:
            raise ValueError(f"kernel mutant {m.id}: layouts {sorted(unknown)} name no specialization of kernel "
                             f"{m.kind!r} (its kernel names: {sorted(names[m.kind])})")


check_layouts()
assert all(bool(m.fuzz_theorem) != bool(m.fuzz_skip) for m in MUTANTS), "a fuzz replay or the reason there is none"


def of_kind(kind: str) -> tuple:
    """The registered mutants of one kernel, in registry order (read at call time)."""
    return tuple(m for m in BY_ID.values() if m.kind == kind)


def get(mutant_id: str) -> KernelMutant:
    try:
        return BY_ID[mutant_id]
    except KeyError:
        raise KeyError(f"unknown kernel mutant {mutant_id!r}; registered: {', '.join(BY_ID)}") from None


def fuzzed() -> dict:
    """``{spec theorem id: [kernel mutant, ...]}`` for the mutants the fuzz replays."""
    out: dict = {}
    for m in BY_ID.values():
        if m.fuzz_theorem:
            out.setdefault(m.fuzz_theorem, []).append(m)
    return out
