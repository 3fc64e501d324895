"""The drop-ins' one way to refuse: a spec condition that does not hold becomes a
``SpecArgumentError`` (a ``ValueError``) naming the argument, what is wrong with the numbers,
and the spec condition's name and text."""

from __future__ import annotations

import contextlib
from typing import Callable, Iterable, Iterator

import torch

from specbound import spec
from specbound.reference import validation
from specbound.spec import SpecArgumentError, SpecTypeError


def refuse(conditions: Iterable[spec.Condition], message: Callable[[], str],
           error: type[SpecArgumentError] = SpecArgumentError) -> None:
    """Raise ``error`` for the first condition that does not hold."""
    for cond in conditions:
        if not cond.holds:
            raise error(cond.argument, f"{message()} [{cond.name}: {cond.text}]")


def tensor_of(name: str, value, dtypes: tuple[str, ...]) -> torch.Tensor:
    """``value`` itself, refused unless a tensor of one of ``dtypes`` (spec names)."""
    if not isinstance(value, torch.Tensor):
        raise SpecTypeError(name, f"must be a torch.Tensor, got {type(value).__name__}")
    refuse(spec.dtype_ok(validation.dtype_name(value.dtype), dtypes, name),
           lambda: f"has dtype {value.dtype}; sglang's kernel takes {' or '.join(dtypes)}", SpecTypeError)
    return value


def first_other(t: torch.Tensor, fill: int, numel: int) -> int | None:
    """First flat cell of ``t`` in ``[0, numel)`` that does not hold ``fill``, or None."""
    bad = torch.nonzero(t.reshape(-1)[:numel] != fill)
    return int(bad[0, 0]) if bad.numel() else None


@contextlib.contextmanager
def conditions_named() -> Iterator[None]:
    """Errors of :mod:`specbound.reference.validation` inside get the spec condition they
    carry appended, worded as :func:`refuse` words its own."""
    try:
        yield
    except SpecArgumentError as exc:
        cond = getattr(exc, "spec_condition", None)
        if cond is None or type(exc) not in (SpecArgumentError, SpecTypeError):
            raise
        raise type(exc)(exc.argument, f"{exc.condition} [{cond.name}: {cond.text}]") from None
