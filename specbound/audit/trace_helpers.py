"""An engine's pure helpers in the buffer tracer (a mixin of :class:`.trace.Tracer`): a call of a
helper that only computes (arithmetic, if/assert, no tensors) is executed symbolically on the
arguments' Z3 terms, path by path (:mod:`.helper_paths`), the engine's own enum its helpers
branch on (its bindings' ``helper_enum``: sglang's ``TreeMaskMode``) loaded for it.
"""

from __future__ import annotations

import enum
import math

import z3

from . import helper_paths
from .program import FuncInfo
from .trace_values import MAX_ALTERNATIVES, EnumMember, NoneValue, Num, Opaque, Truth, source_text


class HelpersMixin:
    def _execute(self, func: FuncInfo, args, frame, path, call):
        """Run a pure engine helper (arithmetic, if/assert, no tensors) on the arguments'
        Z3 terms, path by path (``helper_paths.explore``).  None when an argument is not a
        number or the helper cannot run symbolically (the caller then reads its returns)."""
        combos = [([], path)]
        for name in func.params():
            expr, f = args.get(name, (None, None))
            if expr is None:
                return None
            nxt = []
            for values, p in combos:
                for v, q in self.resolve(expr, f, p):
                    if not isinstance(v, (Num, Truth, EnumMember, NoneValue)):
                        return None
                    nxt.append((values + [self._concrete(v)], q))
            combos = nxt[:MAX_ALTERNATIVES]
        hook = helper_paths.make_bool_hook()
        ns = {"__sb_bool__": hook, "math": math}
        modes = self._helper_enum()
        if modes is not None:
            ns[modes.__name__] = modes
        try:
            fn = self.p.index.load_helper(func.as_found(self.p.index), ns, transform=helper_paths.instrument)
        except Exception:  # noqa: BLE001 - not executable alone: read its returns instead
            return None
        out = []
        where = f"{frame.func.rel}:{call.lineno}"
        for values, path in combos:
            conds = [c for c in path.conds if isinstance(c, z3.BoolRef)]
            expl = helper_paths.explore(hook, lambda: fn(*values), conds)
            if expl.unsupported or expl.truncated:
                return None
            for run in expl.paths:
                if not run.returned and isinstance(run.error, (NameError, AttributeError, ImportError)):
                    return None  # a global this stand-in namespace lacks: read the returns instead
                if not run.returned:
                    continue  # the helper raises there: no buffer on that path
                p = path.step(f"{where} {source_text(call)[:80]} (executed symbolically: {func.where})")
                for c in run.condition:
                    p = p.cond(c)
                out.append((self._from_python(run.value), p))
        return out

    def _helper_enum(self):
        if self._modes is None:
            self._modes = False
            name = self.bindings.helper_enum
            for cls in (self.p.classes_named(name) if name else []):
                try:
                    self._modes = self.p.index.load_helper(
                        FuncInfo(cls.node, cls.path, cls.rel).as_found(self.p.index),
                        {"IntEnum": enum.IntEnum, "Enum": enum.Enum, "enum": enum})
                    break
                except Exception:  # noqa: BLE001
                    continue
        return self._modes or None

    def _concrete(self, v):
        if isinstance(v, NoneValue):
            return None
        if isinstance(v, EnumMember):
            modes = self._helper_enum()
            if modes is not None and v.enum == modes.__name__ and v.member in modes.__members__:
                return modes[v.member]
            return v
        return v.term

    def _from_python(self, x):
        if isinstance(x, enum.Enum):
            return EnumMember(type(x).__name__, x.name)
        if isinstance(x, bool) or isinstance(x, z3.BoolRef):
            return Truth(x)
        if isinstance(x, int) or isinstance(x, z3.ArithRef):
            return Num(x)
        if x is None:
            return NoneValue()
        return Opaque(repr(x)[:60])
