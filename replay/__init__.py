"""Replays: one concrete batch launched on a real Triton kernel under the checked interpreter,
and judged.

This is the one meaning of "replay" in specbound.  A counterexample, from whatever found it
(a kernel theorem's refuted obligation, a spec mutant, an audited sglang buffer), is made
concrete by its finder; what happens when it is launched is decided here, once:

=================  ==========================================================================
``outcome``        :class:`Replay`, the one result type, and the verdicts it can carry
``checked``        :func:`checked_launch` (run a launch, turn any fault into a ``Replay``) and
                   :func:`run` (that, then the caller's comparison of what it wrote)
``kernel_source``  :func:`load_kernel`: an engine's kernel, read from its source file by path
=================  ==========================================================================

What a replay of one of specbound's own kernels builds (its batch, its launch plan from
:mod:`specbound.kernels.plan`, what it is compared with) lives in that kernel's verifier
module (``specbound.proofs.symexec.verifiers``), with everything else about the kernel; how
it is run and judged is :func:`run`.  How an engine's launch sites launch its kernels is
that engine's adapter's (``specbound.engines.<engine>``: sglang's ``launch``, vLLM's
``replay``), which builds the batch and calls :func:`checked_launch` here.

Two re-runs keep the word outside this package, with the same meaning: the CUDA tree audit's
``python -m specbound.engines.sglang.cuda.replay`` runs sglang's compiled CUDA source under
AddressSanitizer (the checked interpreter does not apply to it), and ``specbound fuzz
--replay`` re-runs one failing fuzz case through its property.

Place in the import graph: above ``specbound.kernels`` and ``specbound.reference``, below
everything that finds counterexamples (the kernel verifier ``specbound.proofs.symexec``, the
fuzz, the audit).  Nothing here imports those, nor Z3: a replay takes plain ints and
tensors.  torch and triton are imported inside the launches only.
"""

from .checked import checked_launch, oob_text, run
from .kernel_source import load_kernel
from .outcome import FAULTS, VERDICTS, Replay

__all__ = ["FAULTS", "VERDICTS", "Replay", "checked_launch", "load_kernel", "oob_text", "run"]
