"""The one result of a replay, and the verdicts it can carry."""

from __future__ import annotations

from dataclasses import dataclass, field

VERDICTS = {
    "oob": "an access outside the tensor its pointer came from (the checked interpreter's OutOfBoundsAccess)",
    "race": "two programs of one launch stored to one cell",
    "assert": "a device_assert in the kernel fired",
    "wrap": "Triton's int32 overflow check fired (compiled, the value would silently wrap)",
    "error": "the launch raised something other than a fault above (only where the caller asked to catch it)",
    "output": "the launch ran clean, but what it wrote differs from the reference or the spec",
    "none": "nothing reproduced: the launch ran clean (and matched, where it was compared)",
    "unavailable": "the replay could not be run on this machine (e.g. buffers too big to allocate)",
}
# The verdicts that are a fault of the launch itself (checked_launch returns one of these).
FAULTS = ("oob", "race", "assert", "wrap", "error")


@dataclass
class Replay:
    """What one launch did: ``verdict`` (a key of :data:`VERDICTS`), what was seen, and the
    concrete launch.  ``kernel`` names what ran; ``stand_in`` is empty when the kernel the
    counterexample is about ran, else why another one ran in its place."""

    verdict: str
    detail: str
    inputs: dict = field(default_factory=dict)
    kernel: str = ""
    stand_in: str = ""

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {sorted(VERDICTS)}, got {self.verdict!r}")

    @property
    def fault(self) -> bool:
        return self.verdict in FAULTS
