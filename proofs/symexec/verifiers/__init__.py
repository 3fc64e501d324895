"""One module per Triton kernel we verify, and the one place they are registered.

Each module holds everything the verifier knows about its kernel and declares it as
``VERIFIER`` (a :class:`~specbound.proofs.symexec.models.KernelVerifier`): the constexpr
specializations it covers (the default subset and every covered one: a grid of lane bounds and
the serving envelope's launches ``kernels/plan.py`` selects for proof), the host contract
and tensor models (``symbolic_run``: the kernel's launch plan from ``kernels/plan.py`` evaluated
on Z3 terms, sizes and preconditions from the spec), the store regions and lemmas, the
footprint maps, the replay box, the mutants, and the concrete replay launch.  The theorem
runner (:mod:`..theorems`), the mutant registry (:mod:`..mutants`), the manifest enumeration
(``specbound manifest``) and ``specbound prove --kernels`` read :data:`VERIFIERS` and nothing
else.

Adding a kernel
---------------

1. Write its launch plan in ``kernels/plan.py`` (``<name>_plan(tensors, **sizes) -> LaunchPlan``:
   grid, arguments, constexprs), and launch the wrapper through it.
2. Write ``verifiers/<kernel>.py`` on the shape of :mod:`.fill_prefix` (the smallest): a
   frozen spec dataclass (``name``, ``label``), ``symbolic_run`` (tensors from the spec's
   allocation functions, the plan on Z3 terms checked with ``models.check_plan``, contracts
   as core axioms), ``footprint_obligations`` (the spec cell each store's lanes denote, via
   :mod:`..footprint`), ``replay`` (the concretised counterexample as a batch, launched by
   :mod:`specbound.replay.ours` through the same plan under the checked interpreter), ``MUTANTS`` (one planted fault per property, or a
   ``without_mutant`` reason), and ``VERIFIER``.
3. Add it to :data:`VERIFIERS` below.  ``specbound manifest`` then names its theorem ids as
   new until a full ``specbound prove --kernels --all --json R`` run is recorded with
   ``specbound manifest --write --report R`` (and ``specbound docs`` regenerates the tables).
"""

from __future__ import annotations

from . import draft_kv, fill_prefix, tree_build

# The registration: theorem, report and manifest order is this order.
VERIFIERS = (draft_kv.VERIFIER, tree_build.VERIFIER, fill_prefix.VERIFIER)

BY_KIND = {v.kind: v for v in VERIFIERS}
assert len(BY_KIND) == len(VERIFIERS), "two kernel modules with one kind"


def get(kind: str):
    try:
        return BY_KIND[kind]
    except KeyError:
        raise KeyError(f"unknown kernel {kind!r}; registered: {', '.join(BY_KIND)}") from None
