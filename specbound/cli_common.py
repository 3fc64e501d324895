"""What every ``specbound`` command shares: output paths checked before any work starts, the
checkout the docs live in, and the verdict line each command ends with.

Verdict line (the last line on stdout): ``<command>: OK|FAILED|INCOMPLETE (<counts>)``, e.g.
``fuzz: OK (9 properties, 1520 examples)``; INCOMPLETE only for the audit's exit 3.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import specbound
from specbound.spec import SpecArgumentError


def positive_int(name: str):
    """An argparse type: a whole number >= 1, refused naming ``name``."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a positive integer, got {text!r}") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{name} must be >= 1, got {value}")
        return value
    return parse


def add_output_option(parser, flag: str = "--json", help: str = "write the machine-readable report here"):
    """``flag PATH`` on ``parser``, remembered so that :func:`check_outputs` checks it before the
    command runs (a bad path is a bad command line, not a failure found after minutes of work)."""
    action = parser.add_argument(flag, metavar="PATH", help=help)
    parser.set_defaults(_outputs=(*(parser.get_default("_outputs") or ()), (flag, action.dest)))
    return action


def check_outputs(args) -> None:
    """Every output path the parsed command line names can be written (see :func:`check_writable`)."""
    for flag, dest in getattr(args, "_outputs", ()):
        path = getattr(args, dest, None)
        if path:
            check_writable(flag, path)


def check_writable(option: str, path) -> None:
    """Raise naming ``option`` unless a file can be written at ``path``: its folder exists (it is
    never created), it is not a folder, and the file can be opened for writing.  The probe leaves
    nothing behind: an existing file is opened for appending, a new one is created and removed."""
    p = Path(path)
    parent = p.parent
    if p.is_dir():
        raise SpecArgumentError(option, f"cannot write {path}: it is a directory")
    if not parent.exists():
        raise SpecArgumentError(option, f"cannot write {path}: the directory {parent} does not exist")
    if not parent.is_dir():
        raise SpecArgumentError(option, f"cannot write {path}: {parent} is not a directory")
    try:
        if p.exists():
            with open(p, "a"):
                pass
        else:
            os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
            os.unlink(p)
    except OSError as exc:
        raise SpecArgumentError(option, f"cannot write {path}: {exc.strerror or exc}") from None


def checkout(command: str) -> Path:
    """The source checkout this specbound is installed from (the folder holding its
    pyproject.toml and docs/), found from the package's own location, not the current folder."""
    root = Path(specbound.__file__).resolve().parent.parent
    project = root / "pyproject.toml"
    if project.is_file() and (root / "docs").is_dir() and 'name = "specbound"' in project.read_text():
        return root
    raise SpecArgumentError(command, f"specbound at {Path(specbound.__file__).parent} is not installed from a "
                                     "source checkout (no specbound pyproject.toml and docs/ beside it); the docs "
                                     "live in the repository: run this from an editable install (pip install -e)")


def verdict(command: str, ok: bool, details: str, word: str | None = None, out=None) -> None:
    """Print the command's last line: ``<command>: OK|FAILED (<details>)``."""
    print(f"{command}: {word or ('OK' if ok else 'FAILED')} ({details})", file=out or sys.stdout, flush=True)
