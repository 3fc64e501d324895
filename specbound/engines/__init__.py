"""Serving engines whose Triton kernels specbound proves and audits from a release's source
text (an engine is never imported: it needs CUDA and a hundred packages).  One package per
engine, above the engine-neutral layers (``replay``, the kernel verifier, the audit core),
which call an engine only through what its package provides:

==================  ===========================================================================
where its sources   a ``locate`` module: the engine's tree from an explicit path, an environment
live                variable or an installed/fetched release; a ``NotInstalled``/``NotFound``
                    error naming the argument and what was missing
kernels and host    the file and name of each kernel (one definition each) and the host contract
contract            its launch sites give it: grid, tensor extents, constexprs, the facts the
                    engine checks and those it only relies on
names for the      a :class:`specbound.audit.engine_bindings.Bindings` handed to the audit
spec's quantities   core's tracer and judge: the engine's names for the spec's quantities, its
                    allocators, the enum its helpers branch on, what it relies on unchecked; and
                    its kernels' parameter names (:class:`specbound.audit.kernels.Aliases`)
launch sites and    which specializations its launch sites pick, over our serving envelope or a
envelope            release's configurations
symbolic models     a run of each kernel under :mod:`specbound.proofs.symexec` from that contract,
                    its obligations, proved or refuted through
                    :mod:`specbound.proofs.symexec.engine_theorems`
replays             each counterexample launched on the engine's own kernel (read by path with
                    :func:`specbound.replay.load_kernel`, run by
                    :func:`specbound.replay.checked_launch`) as its launch sites launch it
releases            how older releases differ, and how one is fetched into a cache
the audit command   ``specbound audit <engine>``: rows with the statuses and exit codes of
                    :mod:`specbound.audit.report`, JSON and SARIF
==================  ===========================================================================

sglang (:mod:`.sglang`) and vLLM (:mod:`.vllm`) provide these; a third engine is one new package.
"""
