"""Interpreter compatibility shims, installed only when the kernels run interpreted.

triton 3.6's interpreter converts a scalar tensor to a Python int with
``int(handle.data)``; its scalars are 1-element 1-D arrays, which NumPy >= 2.4 refuses
to convert, so ``for i in range(0, scalar_tensor, BLOCK)`` (a loop bounded by a loaded
value, as both kernels use) fails.  triton 3.7+ squeezes first.  We re-patch
``__index__`` the same way after the interpreter's own tensor patch, for every release.
"""

from __future__ import annotations

import numpy as np

_installed = False


def _index(self):
    return int(np.asarray(self.handle.data).reshape(-1)[0])


def install() -> None:
    global _installed
    if _installed:
        return
    from triton.runtime import interpreter as mod

    orig = getattr(mod, "_patch_lang_tensor", None)
    if orig is None:  # layout of a future release: nothing to fix
        _installed = True
        return

    def patched(tensor, *args, **kwargs):
        res = orig(tensor, *args, **kwargs)
        scope = args[0] if args else kwargs.get("scope")
        if scope is not None and hasattr(scope, "set_attr"):
            scope.set_attr(tensor, "__index__", _index)
        else:  # releases without a patch scope set attributes directly
            tensor.__index__ = _index
        return res

    patched.__wrapped__ = orig
    mod._patch_lang_tensor = patched
    _installed = True
