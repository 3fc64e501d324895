"""Run chosen programs of a launch under Triton's interpreter, the kernel seeing the whole grid.

A replay of a wrap in a program near the end of a large grid would otherwise first run every
earlier program.  Restricting the launch to some programs shows the full launch's behaviour of
those programs only when programs are independent: no program reads a cell another one writes
(a kernel's proved RACE-FREE theorem says so: every store and every read of a written tensor
lies in the program's own region, and the regions are disjoint).  The caller states that.
"""

from __future__ import annotations

from contextlib import contextmanager


@contextmanager
def only_programs(grid: tuple, programs: list):
    """Inside, a launch with grid ``(len(programs),)`` runs exactly ``programs`` (each a tuple
    of program ids of ``grid``, in that order) with ``tl.program_id`` / ``tl.num_programs``
    answering as in a launch over ``grid``.  Yields that small grid."""
    from triton.runtime import interpreter

    full = tuple(grid) + (1,) * (3 - len(grid))
    picked = [tuple(p) + (0,) * (3 - len(p)) for p in programs]
    for p in picked:
        if not all(0 <= i < n for i, n in zip(p, full)):
            raise ValueError(f"programs: {p} lies outside the grid {tuple(grid)}")
    if not picked:
        raise ValueError("programs: empty (name at least one program of the grid)")
    b = interpreter.interpreter_builder
    set_dim, set_idx = type(b).set_grid_dim, type(b).set_grid_idx
    b.set_grid_dim = lambda *_small: set_dim(b, *full)
    b.set_grid_idx = lambda x, _y, _z: set_idx(b, *picked[x])
    try:
        yield (len(picked),)
    finally:
        del b.set_grid_dim, b.set_grid_idx
