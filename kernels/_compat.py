"""Interpreter compatibility shims, installed only when the kernels run interpreted.

triton 3.6's interpreter converts a scalar tensor to a Python int with
``int(handle.data)``; its scalars are 1-element 1-D arrays, which NumPy >= 2.4 refuses
to convert, so ``for i in range(0, scalar_tensor, BLOCK)`` (a loop bounded by a loaded
value, as both kernels use) fails.  triton 3.7+ squeezes first.  We re-patch
``__index__`` the same way after the interpreter's own tensor patch, for every release.

Every interpreted launch, and every call of a ``@triton.jit`` helper inside one, patches
``triton.language``'s builtins afresh, finding them with ``inspect.getmembers`` over whole
modules and classes: a quarter of a small launch's time.  Which attributes are builtins does
not change, so we list them once, at install, and patch exactly the ones Triton's own search
finds (``tests/test_kernels_checked.py`` compares the two).
"""

from __future__ import annotations

import inspect

import numpy as np

_installed = False
_BUILTIN_NAMES: dict = {}   # module or class -> names of its Triton builtins, listed before any launch


def _index(self):
    return int(np.asarray(self.handle.data).reshape(-1)[0])


def _listed_patch_builtin(mod):
    """``mod._patch_builtin`` with the builtins listed once, here, while no launch has patched
    them (Triton's helper calls leave some patched for good); None when this release's is not
    the ``(pkg, builder, scope)`` we know, or a launch has run already."""
    orig = getattr(mod, "_patch_builtin", None)
    if orig is None or not hasattr(mod, "_patch_attr") or \
            list(inspect.signature(orig).parameters) != ["pkg", "builder", "scope"]:
        return None
    tl = mod.tl
    is_builtin = tl.core.is_builtin
    if not all(is_builtin(f) for f in (tl.load, tl.core.load, tl.reduce, tl.core.reduce)):
        return None
    for pkg in (tl, tl.tensor, tl.math, tl.core, tl.core.tensor_descriptor_base):   # what _patch_lang patches
        _BUILTIN_NAMES[pkg] = tuple(n for n, m in inspect.getmembers(pkg) if is_builtin(m))

    def patch_builtin(pkg, builder, scope):
        names = _BUILTIN_NAMES.get(pkg)
        if names is None:   # a package we did not list: Triton's own search
            return orig(pkg, builder, scope)
        for name in names:
            member = getattr(pkg, name)
            if is_builtin(member):   # not patched already (by an enclosing launch, or for good)
                mod._patch_attr(pkg, name, member, builder, scope)

    patch_builtin.__wrapped__ = orig
    return patch_builtin


def install() -> None:
    global _installed
    if _installed:
        return
    from triton.runtime import interpreter as mod

    listed = _listed_patch_builtin(mod)
    if listed is not None:
        mod._patch_builtin = listed

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
