"""Buffers of the buffer tracer (a mixin of :class:`.trace.Tracer`): ``torch.zeros/empty/full``
allocations, whose shape is evaluated to Z3 terms, and what indexing makes of them (a row,
a slice of the first dimension, a dimension of ``.shape``).
"""

from __future__ import annotations

import ast
from dataclasses import replace

import z3

from .trace_values import (
    MAX_ALTERNATIVES, Alloc, Ended, Frame, Items, NoneValue, Num, Opaque, Path, ShapeOf, const_index, describe,
    row_of, source_text, symbolic,
)


class BuffersMixin:
    def _alloc(self, e: ast.Call, frame: Frame, path: Path, shape_args: bool):
        op = source_text(e.func)
        positional = [a for a in e.args]
        kw = {k.arg: k.value for k in e.keywords if k.arg}
        if op.endswith(".full") or op.endswith(".empty_strided"):
            shape_exprs = positional[:1] or [kw.get("size")]
        elif len(positional) == 1:
            shape_exprs = positional
        elif positional:
            shape_exprs = [ast.Tuple(elts=positional, ctx=ast.Load())]
        else:
            shape_exprs = [kw.get("size")]
        if shape_exprs[0] is None:
            return [(Ended(f"`{source_text(e)[:60]}`: no shape argument", self._at(frame, e)), path)]
        out = []
        site = f"{frame.func.rel}:{e.lineno}"
        holder = path.holder   # before the shape's own names are traced
        for shape, p in self.resolve(shape_exprs[0], frame, path):
            if isinstance(shape, Num):
                dim_lists = [([shape.term], p)]
            elif isinstance(shape, Items):
                dim_lists = self._dims(list(shape.items), p)
            elif isinstance(shape, ShapeOf):
                dim_lists = [(list(shape.alloc.dims), p)]
            elif isinstance(shape, Ended):
                out.append((shape, p))
                continue
            else:
                out.append((Ended(f"shape `{source_text(shape_exprs[0])[:60]}` is not a number "
                                  f"({describe(shape)})", site), p))
                continue
            for dims, q in dim_lists:
                bad = next((d for d in dims if isinstance(d, (Ended, Opaque))), None)
                if bad is not None:
                    # The buffer exists, its size is what is unknown (never "absent").
                    why = bad.reason if isinstance(bad, Ended) else f"`{bad.text}` is neither traced nor bound"
                    out.append((Ended(f"size of `{source_text(e)[:80]}` unknown: {why}", site,
                                      machinery=isinstance(bad, Ended) and bad.machinery), q))
                    continue
                out.append((Alloc(op, tuple(dims), site, source_text(e)[:160], frame.owner, frame.func.qual, via=frame.via,
                                  holder=holder),
                            q.step(f"{site} {source_text(e)[:90]}")))
        return out

    def _dims(self, items, path):
        """Every combination of the dimensions' values: [(terms, path)]."""
        combos = [([], path)]
        for expr, f in items:
            nxt = []
            for dims, p in combos:
                vals = self.resolve(expr, f, p)
                for v, q in vals:
                    if isinstance(v, Num):
                        nxt.append((dims + [v.term], q))
                    elif isinstance(v, (Ended, Opaque)):
                        nxt.append((dims + [v], q))
                    else:
                        nxt.append((dims + [Ended(f"dimension `{source_text(expr)[:60]}` is {describe(v)}",
                                                  f"{f.func.rel}:{getattr(expr, 'lineno', 0)}")], q))
            combos = nxt[:MAX_ALTERNATIVES]
        return combos

    def _subscript(self, e: ast.Subscript, frame: Frame, path: Path):
        out = []
        for v, p in self.resolve(e.value, frame, path):
            if isinstance(v, Items):
                idx = const_index(e.slice)
                chosen = [v.items[idx]] if idx is not None and -len(v.items) <= idx < len(v.items) else list(v.items)
                for expr, f in chosen:
                    out += self.resolve(expr, f, p)
            elif isinstance(v, ShapeOf):
                idx = const_index(e.slice)
                if idx is None or not -len(v.alloc.dims) <= idx < len(v.alloc.dims):
                    out.append((Ended(f"`{source_text(e)}`: dimension index not a constant in range", self._at(frame, e)), p))
                else:
                    out.append((Num(v.alloc.dims[idx]), p))
            elif isinstance(v, Alloc):
                out += self._view(v, e.slice, frame, p)
            elif isinstance(v, (Ended, Opaque)):
                out.append((v, p))
            elif isinstance(v, NoneValue):
                continue
            else:
                out.append((Opaque(source_text(e)[:60]), p))
        return out

    def _view(self, alloc: Alloc, sl, frame, path):
        if isinstance(sl, ast.Tuple):
            return [(Ended(f"multi-dimensional index `{source_text(sl)}` of a buffer", self._at(frame, sl), machinery=True), path)]
        if not isinstance(sl, ast.Slice):
            return [(row_of(alloc, f"[{source_text(sl)}]"), path)]
        if sl.step is not None or not alloc.dims:
            return [(Ended(f"strided slice `{source_text(sl)}`", self._at(frame, sl), machinery=True), path)]
        out = []
        lows = self.resolve(sl.lower, frame, path) if sl.lower is not None else [(Num(0), path)]
        for lo, p in lows:
            highs = self.resolve(sl.upper, frame, p) if sl.upper is not None else [(Num(alloc.dims[0]), p)]
            for hi, q in highs:
                if not (isinstance(lo, Num) and isinstance(hi, Num)):
                    out.append((Ended(f"slice bound of `[{source_text(sl)}]` is not a number", self._at(frame, sl)), q))
                    continue
                d0 = alloc.dims[0]
                top = z3.If(hi.term < d0, hi.term, d0) if symbolic(hi.term, d0) else min(hi.term, d0)
                out.append((replace(alloc, dims=(top - lo.term, *alloc.dims[1:]),
                                    view=alloc.view + f"[{source_text(sl)}]"), q))
        return out
