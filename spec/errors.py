"""Errors raised for bad input, always naming the argument and the violated condition."""

from __future__ import annotations


class SpecArgumentError(ValueError):
    """An argument violates a documented precondition.

    ``argument`` names the offending argument, ``condition`` states what was expected.
    """

    def __init__(self, argument: str, condition: str):
        self.argument = argument
        self.condition = condition
        super().__init__(f"{argument}: {condition}")


class SpecTypeError(SpecArgumentError, TypeError):
    """An argument has the wrong type (also a ``TypeError``)."""
