"""What a checked interpreter run reports: :class:`OutOfBoundsAccess`, the tensor
arguments and launches it saw, and the session that collects them (the mechanics are in
:mod:`specbound.kernels.checked`, which exports these names)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ._footprint import Footprint


class OutOfBoundsAccess(IndexError):
    """An interpreted load/store/atomic addressed memory outside the tensor argument its
    pointer derives from (or, where provenance is lost, outside every argument)."""

    def __init__(self, *, kernel: str, op: str, program_id: tuple, lane: tuple, flat_lane: int,
                 address: int, nbytes: int, nearest: str | None, past_end: int | None,
                 before_start: int | None, num_bad_lanes: int, argument: str | None = None,
                 landed_in: str | None = None, landed_element: int | None = None,
                 provenance_lost: str | None = None, source_file: str | None = None,
                 source_line: int | None = None, source_text: str | None = None):
        self.kernel = kernel
        self.op = op
        self.program_id = program_id
        self.lane = lane
        self.flat_lane = flat_lane
        self.address = address
        self.nbytes = nbytes
        # The argument the lane's pointer derives from when known (then equal to
        # ``argument``), else the argument nearest to the address.
        self.nearest = nearest
        # Elements past ``nearest``'s end (0 = the first element after it), or elements
        # before its start; exactly one of the two is set when a tensor exists.
        self.past_end = past_end
        self.before_start = before_start
        self.num_bad_lanes = num_bad_lanes
        self.argument = argument
        # Another argument whose span holds the address (an overrun into a neighbour),
        # and the element of it that the access hits.
        self.landed_in = landed_in
        self.landed_element = landed_element
        # Why the lane's provenance is unknown (then it was checked against every
        # argument); None when it was tracked.
        self.provenance_lost = provenance_lost
        self.source_file = source_file
        self.source_line = source_line
        self.source_text = source_text
        if nearest is None:
            where = "no tensor argument"
        elif past_end is not None:
            where = f"{past_end} element(s) past the end of {nearest!r}"
        else:
            where = f"{before_start} element(s) before the start of {nearest!r}"
        if landed_in is not None:
            where += f", inside argument {landed_in!r} (element {landed_element})"
        if provenance_lost is not None:
            where += f"; pointer provenance lost ({provenance_lost}): checked against every argument"
        super().__init__(
            f"{kernel}: out-of-bounds {op} by program {program_id}, lane {lane} "
            f"(flat {flat_lane}; {num_bad_lanes} bad lane(s)) at address {address:#x} "
            f"({nbytes} byte(s)): {where}{_site_text(source_file, source_line, source_text)}")

    @property
    def source(self) -> str | None:
        """``file:line: text`` of the kernel line that made the access."""
        if self.source_file is None:
            return None
        return f"{self.source_file}:{self.source_line}: {self.source_text}"


def _site_text(path, line, text) -> str:
    # The message names the file by its base name: the report stays the same wherever
    # the kernel's package is installed (the full path is in ``source_file``).
    return "" if path is None else f"; at {os.path.basename(path)}:{line}: {text}"


@dataclass(frozen=True)
class TensorArg:
    """A tensor argument of one launch: the byte range the kernel may touch."""
    name: str
    base: int          # address of element 0 of the view
    nbytes: int        # bytes spanned by the view (0 for an empty tensor)
    itemsize: int
    # Position among the launch's tensor arguments (per-lane provenance refers to it).
    index: int = field(default=-1, compare=False)

    @property
    def end(self) -> int:
        return self.base + self.nbytes


@dataclass
class LaunchRecord:
    kernel: str
    grid: tuple | None
    tensors: dict[str, TensorArg]
    loads: int = 0
    stores: int = 0
    # "reason at file:line" -> lanes checked without provenance (against every argument)
    provenance_lost: dict[str, int] = field(default_factory=dict)
    # id() of each host-side argument object -> its TensorArg (tags argument pointers)
    by_id: dict[int, TensorArg] = field(default_factory=dict, repr=False)
    # cells stored, per program and argument (only with record_footprint)
    footprint: Footprint = field(default_factory=Footprint, repr=False)

    @property
    def writes(self) -> dict[str, set[int]]:
        """Tensor argument name -> element indices written (only with record_footprint),
        each cell under the argument its pointer came from."""
        return self.footprint.by_argument()

    @property
    def writes_by_program(self) -> dict[tuple, dict[str, set[int]]]:
        """Program id -> the same, per program (only with record_footprint): what a race
        check compares, since the interpreter runs the programs one after the other."""
        return self.footprint.by_program()


@dataclass
class CheckedSession:
    """Handle yielded by :func:`checked_interpreter`."""
    record_footprint: bool
    launches: list[LaunchRecord] = field(default_factory=list)
    accesses_checked: int = 0
    # lanes whose pointer provenance was lost (checked against every argument instead)
    accesses_without_provenance: int = 0

    def written(self, kernel: str | None = None) -> dict[str, set[int]]:
        """Union over launches (optionally of one kernel) of the element indices written
        per tensor argument name."""
        out: dict[str, set[int]] = {}
        for rec in self.launches:
            if kernel is not None and rec.kernel != kernel:
                continue
            for name, cells in rec.writes.items():
                out.setdefault(name, set()).update(cells)
        return out

    def conflicting_writes(self) -> str | None:
        """The first memory cell two programs of one launch both stored (a race on a GPU,
        where programs run concurrently), described; None when there is none.  Cells are
        compared by address, so two programs storing one cell through two aliasing
        arguments conflict too.  Needs ``record_footprint``."""
        for rec in self.launches:
            hit = rec.footprint.first_conflict()
            if hit is not None:
                (p0, n0, c0), (p1, n1, c1) = hit
                alias = "" if (n0, c0) == (n1, c1) else f" (as {n1}[{c1}])"
                return f"{rec.kernel}: {n0}[{c0}] stored by programs {p0} and {p1}{alias}"
        return None

    def clear(self) -> None:
        self.launches.clear()
        self.accesses_checked = 0
        self.accesses_without_provenance = 0
