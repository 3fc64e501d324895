"""Run one launch under the checked interpreter and classify what went wrong, in one place."""

from __future__ import annotations

import re
from typing import Callable

from .outcome import Replay

# Triton's interpreter, asked to sanitize overflow, raises an AssertionError with this text.
_INT_OVERFLOW = re.compile(r"int\d+ overflow detected")


def oob_text(exc) -> str:
    """The checked interpreter's message without the host address (it changes every run)."""
    return re.sub(r" at address 0x[0-9a-fA-F]+", "", str(exc))


def checked_launch(launch: Callable[[], object], inputs: dict | None = None, *, kernel: str = "",
                   catch_errors: bool = False, session_out: list | None = None) -> Replay | None:
    """Call ``launch()`` under the checked interpreter with a per-program store recorder.

    Returns a :class:`Replay` for an out-of-bounds access (``oob``), Triton's int32 overflow
    check (``wrap``), any other failed assert (``assert``), or two programs of the launch
    storing one cell (``race``); None when it ran clean.  Any other exception propagates,
    unless ``catch_errors`` (then ``error``, with its type and message): a crash of the
    replay machinery must not read as a verdict about the kernel unless the caller says so.
    ``session_out``, when given, receives the session (its footprint: ``written()``)."""
    from specbound.kernels.checked import OutOfBoundsAccess, checked_interpreter

    inputs = inputs if inputs is not None else {}
    with checked_interpreter(record_footprint=True) as session:
        if session_out is not None:
            session_out.append(session)
        try:
            launch()
        except OutOfBoundsAccess as exc:
            return Replay("oob", oob_text(exc), inputs, kernel)
        except AssertionError as exc:
            if _INT_OVERFLOW.search(str(exc)):
                return Replay("wrap", f"Triton's int32 overflow check: {exc}", inputs, kernel)
            return Replay("assert", f"device_assert fired: {exc}", inputs, kernel)
        except Exception as exc:  # noqa: BLE001 - re-raised unless the caller asked for a verdict
            if not catch_errors:
                raise
            return Replay("error", f"{type(exc).__name__}: {exc}", inputs, kernel)
    race = session.conflicting_writes()
    return Replay("race", race, inputs, kernel) if race else None


def run(launch: Callable[[], object], inputs: dict, *, kernel: str,
           compare: Callable[[], str | None] | None = None) -> Replay:
    """A whole replay: :func:`checked_launch`, then, when it ran clean, ``compare()`` (what
    the launch wrote against the reference or the spec: None when equal, else what
    differs).  Always a :class:`Replay`: a fault, ``output``, or ``none``."""
    fault = checked_launch(launch, inputs, kernel=kernel)
    if fault is not None:
        return fault
    diff = compare() if compare is not None else None
    if diff is not None:
        return Replay("output", diff, inputs, kernel)
    return Replay("none", "the launch ran clean" + (" and matched" if compare is not None else ""), inputs, kernel)
