"""``specbound audit sglang``: audit the installed sglang against the spec.

Exit status: 1 when a row is ``diverged``, ``oob``, ``hang``, ``overrun``, ``holds only if``
or ``refuted`` (sglang disagrees with the spec, one of its kernels left its tensors or did not
finish on an in-contract input, a buffer is too small for the spec's contract, or a symbolic
proof of its kernel is refuted); 3 when nothing was found but not everything was checked
(``--sglang-path`` holds no sglang, or a row is ``error``, ``unknown``, ``unknown signature`` or
``unavailable``); 0 otherwise (:mod:`specbound.audit.report` lists the statuses); 2 only for
a bad command line.
"""

from __future__ import annotations

import argparse

from specbound.cli_common import add_output_option, verdict
from specbound.spec import SpecArgumentError

from .run import DEFAULT_EXAMPLES, DEFAULT_SEED


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return value


def cmd_audit_sglang(args) -> int:
    from . import run
    from .report import EXIT_INCOMPLETE, render_markdown, render_text

    for flag, value in (("--examples", args.examples), ("--seed", args.seed)):
        if args.no_kernels and value is not None:
            raise SpecArgumentError(flag, "sets the random batches of the kernel checks; --no-kernels runs none")
    rep = run.run_audit(args.sglang_path, examples=args.examples or DEFAULT_EXAMPLES,
                        seed=DEFAULT_SEED if args.seed is None else args.seed, kernels=not args.no_kernels,
                        symbolic_all=args.symbolic_all)
    print(render_markdown(rep) if args.markdown else render_text(rep))
    if args.json:
        rep.write_json(args.json)
    rc = rep.exit_code()
    counts = ", ".join(f"{v} {k}" for k, v in rep.counts().items())
    verdict("audit", rc == 0, f"{len(rep.rows)} rows: {counts}", word="INCOMPLETE" if rc == EXIT_INCOMPLETE else None)
    return rc


def register(subparsers) -> None:
    audit = subparsers.add_parser("audit", help="audit an installed library against the spec")
    targets = audit.add_subparsers(dest="target", required=True)
    p = targets.add_parser(
        "sglang", help="check sglang's sizing helpers (Z3) and Triton kernels (checked interpreter), "
        "without importing sglang", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_output_option(p)
    p.add_argument("--examples", type=_positive, default=None, metavar="N",
                   help=f"random batches per kernel check (default {DEFAULT_EXAMPLES}; not with --no-kernels)")
    p.add_argument("--seed", type=int, default=None,
                   help=f"seed of the random batches (default {DEFAULT_SEED}; not with --no-kernels)")
    p.add_argument("--sglang-path", metavar="DIR",
                   help="audit the sglang package in DIR (the package folder or a folder holding sglang/) "
                   "instead of the installed one; also $SPECBOUND_SGLANG_PATH")
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("--no-kernels", action="store_true", help="only the helper checks (no Triton)")
    scope.add_argument("--symbolic-all", action="store_true",
                       help="prove sglang's Triton kernels symbolically for every listed specialization "
                       "(kernel.symbolic_proof rows; about 6 minutes more on 2 cores) instead of one per kernel")
    p.set_defaults(func=cmd_audit_sglang)
    from specbound.engines.vllm.audit import register as register_vllm

    register_vllm(targets)
