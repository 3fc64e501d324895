"""specbound.kernels: Triton kernels for the tree build and the draft-decode kv_indices.

Interpreted or compiled
-----------------------
Triton decides at *definition* time of each ``@triton.jit`` function whether it will run
under the interpreter (``TRITON_INTERPRET=1``).  So that the kernels run everywhere, this
package sets ``TRITON_INTERPRET=1`` **before defining its kernels** when the variable is
unset and ``torch.cuda`` is unavailable: on a machine without CUDA the kernels run
interpreted on CPU tensors; on a CUDA machine they are compiled.  An explicit
``TRITON_INTERPRET`` (0 or 1) set before the first import always wins.  The variable is
process wide: Triton kernels defined later by other code are interpreted too.

:data:`INTERPRETED` tells which mode the kernels of this process were defined in.

Public API
----------
* :func:`build_tree` and :func:`draft_decode_kv_indices`: launch wrappers with the
  signatures and results of ``specbound.reference``'s functions.
* :func:`checked_interpreter`, :class:`OutOfBoundsAccess`: the bounds-checked
  interpreter (see :mod:`specbound.kernels.checked`).
* :func:`proved_specialization`: whether a launch's constexprs are a proved specialization
  (``proofs/manifest.json``); the wrappers' ``require_proved=True`` refuses the others with
  :class:`UnprovedSpecialization` (see :mod:`specbound.kernels.plan`: the block choosers and
  the serving envelope).
"""

from __future__ import annotations

import os as _os

if "TRITON_INTERPRET" not in _os.environ:
    import torch as _torch

    if not _torch.cuda.is_available():
        _os.environ["TRITON_INTERPRET"] = "1"


def _refuse_stale_triton() -> None:
    """triton.language defines its own jit helpers (tl.min, tl.sum, ...) at import time;
    if it was imported before TRITON_INTERPRET=1 was set, those stay compiled-only and
    every interpreted kernel would fail deep inside.  Say so at import instead."""
    import sys

    lang = sys.modules.get("triton.language")
    if lang is None or _os.environ.get("TRITON_INTERPRET", "0").lower() not in ("1", "true", "on", "yes"):
        return
    from triton.runtime.jit import JITFunction

    if isinstance(getattr(lang, "min", None), JITFunction):
        raise ImportError(
            "specbound.kernels: triton.language was imported before TRITON_INTERPRET=1 was set, "
            "so Triton's own helpers cannot be interpreted. Import specbound.kernels before "
            "triton (or export TRITON_INTERPRET=1 before starting Python).")


_refuse_stale_triton()

from .checked import (  # noqa: E402
    CheckedSession, LaunchRecord, OutOfBoundsAccess, TensorArg, checked_interpreter,
    interpreter_active,
)

INTERPRETED: bool = interpreter_active()

if INTERPRETED:
    from . import _compat

    _compat.install()

from .plan import UnprovedSpecialization, proved_specialization  # noqa: E402
from .tree_build import build_tree, build_tree_kernel, fill_prefix_kernel  # noqa: E402
from .draft_kv import draft_decode_kv_indices, draft_kv_kernel  # noqa: E402

__all__ = [
    "INTERPRETED", "build_tree", "draft_decode_kv_indices", "build_tree_kernel",
    "fill_prefix_kernel", "draft_kv_kernel", "checked_interpreter", "OutOfBoundsAccess",
    "CheckedSession", "LaunchRecord", "TensorArg", "proved_specialization", "UnprovedSpecialization",
]
