"""Symbolic execution of the Triton kernels against a Z3 stand-in for triton.language.

The executor, bottom up (each module imports only the ones above it):

=================  ==========================================================================
``kernel_files``   our kernel sources, and their torch-free helpers (``plan``, ``source``) by path
``values``         dtypes, blocks over lane variables (``V``, with declared provenance),
                   pointers, tensor models, accesses; lifting, broadcasting, reshaping
``run_state``      what a run accumulates (path condition, obligations ``Ob``, functions and
                   schemas, memory and truncation state) and ``ExecResult``; raise/observe
``truncation``     the no-truncation rule for ``base + arange(N) < x`` masks
``arith``          Triton's integer operators, comparisons and casts (no-wrap at observation)
``flow``           early return, data-dependent ``if``, symbolic loops, inlined helpers
``memory``         program-written memory read back; exact masked prefix sums
``reductions``     ``tl.sum`` / ``tl.max`` / ``tl.min``
``tl_builtins``    the ``tl.*`` functions (loads and stores record the accesses)
``interp``         the statement walker ``Executor`` (a ``RunState`` plus the kernel's source)
=================  ==========================================================================

Import graph: ``values <- run_state <- truncation <- arith``; ``values <- flow <- memory``;
``reductions <- {run_state, memory}``; ``tl_builtins <- {arith, truncation, memory,
reductions}``; ``interp <- {kernel_files, arith, truncation, flow, tl_builtins}``.  The semantic modules
take the run as their first argument; ``flow`` evaluates sub-statements through it
(``run.eval``, ``run.exec_block``), a call back into the walker, not an import.

On top of ``interp``, generic: ``obligations`` (checking one), ``lemmas``, ``models`` (a run's
bounds, region and race obligations; what a kernel module declares, ``KernelVerifier``),
``footprint`` (soundness and coverage from a kernel's maps), ``plant`` (a mutant's planted
change), ``concretise`` (a counterexample made a small concrete batch; launching it is
:mod:`specbound.replay`'s work).  Per kernel: one module each in ``verifiers`` (``draft_kv``, ``tree_build``,
``fill_prefix``; its package docstring says how to add one), registered in
``verifiers.VERIFIERS``, which ``mutants`` (the registry of every kernel mutant) and
``theorems`` (the theorem runner) read.  sglang's own kernels: the ``sglang_*`` modules.
"""
