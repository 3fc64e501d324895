"""The write footprint of one checked launch: which cells each program stored, per
tensor argument (the argument the store's pointer derives from).

Stores are kept as the NumPy arrays of cell indices the checker already has, and turned
into Python sets only when asked for: a serving-size launch stores hundreds of thousands
of lanes, and building sets per store would cost more than interpreting the kernel.
"""

from __future__ import annotations

from math import gcd

import numpy as np

# Cell ranges up to this size are deduplicated with a bitmap (linear time); larger ones
# with np.unique.
_BITMAP_CELLS = 1 << 24


def _distinct(parts: list[np.ndarray]) -> np.ndarray:
    cells = parts[0] if len(parts) == 1 else np.concatenate(parts)
    if cells.size == 0:
        return cells
    top = int(cells.max()) + 1
    if top <= _BITMAP_CELLS:
        seen = np.zeros(top, dtype=bool)
        seen[cells] = True
        return np.flatnonzero(seen)
    return np.unique(cells)


class Footprint:
    """Cells stored during one launch; ``add`` per store, the views on demand."""

    def __init__(self) -> None:
        self._parts: list[tuple[tuple, object, np.ndarray]] = []   # (program id, TensorArg, cells)
        self._by_program: dict[tuple, dict[str, set[int]]] | None = None
        self._by_argument: dict[str, set[int]] | None = None

    def add(self, program_id: tuple, arg, cells: np.ndarray) -> None:
        if cells.size:
            self._parts.append((program_id, arg, cells))
            self._by_program = self._by_argument = None

    def _grouped(self, key) -> dict:
        groups: dict = {}
        for pid, arg, cells in self._parts:
            groups.setdefault(key(pid, arg), []).append(cells)
        return groups

    def by_argument(self) -> dict[str, set[int]]:
        if self._by_argument is None:
            self._by_argument = {name: set(_distinct(parts).tolist())
                                 for name, parts in self._grouped(lambda pid, arg: arg.name).items()}
        return self._by_argument

    def by_program(self) -> dict[tuple, dict[str, set[int]]]:
        if self._by_program is None:
            out: dict[tuple, dict[str, set[int]]] = {}
            for (pid, name), parts in self._grouped(lambda pid, arg: (pid, arg.name)).items():
                out.setdefault(pid, {})[name] = set(_distinct(parts).tolist())
            self._by_program = out
        return self._by_program

    def first_conflict(self):
        """The first memory location two programs both stored, as
        ``((pid, name, cell), (pid, name, cell))`` (earlier program first), or None.

        Locations are bytes of memory, not (argument, cell) pairs, so stores through two
        aliasing arguments conflict too.  "First" is in the order (program, argument
        name, cell) of the later store, so the answer does not depend on the order in
        which the interpreter ran the stores."""
        if not self._parts:
            return None
        merged = self._grouped(lambda pid, arg: (pid, arg))
        pids = sorted({pid for pid, _ in merged})
        names = sorted({arg.name for _, arg in merged})
        grain = 0
        for _, arg in merged:     # the largest unit every cell boundary falls on
            grain = gcd(gcd(grain, arg.itemsize), arg.base)
        cols = {"pid": [], "name": [], "cell": [], "loc": []}
        for (pid, arg), parts in merged.items():
            cells = _distinct(parts).astype(np.int64)
            per = arg.itemsize // grain
            start = (arg.base // grain) + cells * per
            loc = (start[:, None] + np.arange(per, dtype=np.int64)[None, :]).reshape(-1)
            cols["loc"].append(loc)
            cols["cell"].append(np.repeat(cells, per))
            cols["pid"].append(np.full(loc.size, pids.index(pid), dtype=np.int64))
            cols["name"].append(np.full(loc.size, names.index(arg.name), dtype=np.int64))
        pid, name, cell, loc = (np.concatenate(cols[k]) for k in ("pid", "name", "cell", "loc"))
        order = np.lexsort((cell, name, pid, loc))      # by location, then store order
        pid, name, cell, loc = pid[order], name[order], cell[order], loc[order]
        starts = np.r_[True, loc[1:] != loc[:-1]]
        first = np.maximum.accumulate(np.where(starts, np.arange(loc.size), 0))
        clash = np.flatnonzero(pid != pid[first])
        if clash.size == 0:
            return None
        j = clash[np.lexsort((loc[clash], cell[clash], name[clash], pid[clash]))[0]]
        o = first[j]
        return ((pids[pid[o]], names[name[o]], int(cell[o])), (pids[pid[j]], names[name[j]], int(cell[j])))
