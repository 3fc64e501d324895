"""``specbound audit sglang``: audit the installed sglang against the spec.

Output: progress lines on stderr while it runs; on stdout a summary (findings, unguarded
conditions, warnings, not checked, passed), one ``file:line: status: ...`` line per row that is not
a pass (file relative to the sglang package; findings and unguarded conditions with their
evidence), every check, the buffers, and the verdict line.

Exit status: 1 when a row is a finding (``diverged``, ``oob``, ``hang``, ``overrun``, ``holds only
if``, ``refuted``: sglang wrong on an input inside its contract), and with ``--strict`` also when
a row is ``unguarded`` (sglang relies on a condition it never checks); 3 when nothing was found
but not everything was checked (``--sglang-path`` holds no sglang, or a row is ``error``,
``unknown``, ``unknown signature`` or ``unavailable``); 0 otherwise
(:mod:`specbound.audit.statuses` lists the statuses); 2 only for a bad command line.
"""

from __future__ import annotations

import argparse

from specbound.cli_common import add_output_option, positive_int, verdict
from specbound.verify import usable_cores
from specbound.spec import SpecArgumentError

from . import DEFAULT_EXAMPLES, DEFAULT_SEED
from .sarif import write_sarif
from specbound import __version__
from specbound.engines.vllm.audit import register as register_vllm


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return value


def cmd_audit_sglang(args) -> int:
    import sys

    from specbound.engines.sglang import audit as run
    from .report import EXIT_INCOMPLETE, plural, render_markdown, render_text

    for flag, value in (("--examples", args.examples), ("--seed", args.seed)):
        if args.no_kernels and value is not None:
            raise SpecArgumentError(flag, "sets the random batches of the kernel checks; --no-kernels runs none")

    def progress(line: str) -> None:   # stderr: stdout stays the report (and --markdown a clean file)
        print(f"audit: {line}", file=sys.stderr, flush=True)

    rep = run.run_audit(args.sglang_path, examples=args.examples or DEFAULT_EXAMPLES,
                        seed=DEFAULT_SEED if args.seed is None else args.seed, kernels=not args.no_kernels,
                        symbolic_all=args.symbolic_all, progress=progress, jobs=args.jobs or usable_cores())
    print(render_markdown(rep) if args.markdown else render_text(rep))
    if args.json:
        rep.write_json(args.json)
    if args.sarif:
        write_sarif(rep, args.sarif, __version__)
    rc = rep.exit_code(strict=args.strict)
    word, reason = rep.verdict(strict=args.strict)
    verdict("audit", rc == 0, f"{reason}; {plural(len(rep.rows), 'row')}",
            word="INCOMPLETE" if rc == EXIT_INCOMPLETE else None)
    return rc


def register(subparsers) -> None:
    audit = subparsers.add_parser("audit", help="audit an installed library against the spec")
    targets = audit.add_subparsers(dest="target", required=True)
    p = targets.add_parser(
        "sglang", help="check sglang's sizing helpers (Z3) and Triton kernels (checked interpreter), "
        "without importing sglang", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_output_option(p)
    add_output_option(p, "--sarif", help="write the findings and unguarded conditions as SARIF 2.1.0 here "
                      "(one result per row, on its sglang file and line: GitHub code scanning)")
    p.add_argument("--strict", action="store_true",
                   help="unguarded conditions (sglang relies on a condition it never checks) fail too (exit 1)")
    p.add_argument("--examples", type=_positive, default=None, metavar="N",
                   help=f"random batches per kernel check (default {DEFAULT_EXAMPLES}; not with --no-kernels)")
    p.add_argument("--seed", type=int, default=None,
                   help=f"seed of the random batches (default {DEFAULT_SEED}; not with --no-kernels)")
    p.add_argument("--sglang-path", metavar="DIR",
                   help="audit the sglang package in DIR (the package folder or a folder holding sglang/) "
                   "instead of the installed one; also $SPECBOUND_SGLANG_PATH")
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    p.add_argument("--jobs", type=positive_int("--jobs"), default=None, metavar="N",
                   help="worker processes: the stages run side by side, the report and the progress lines "
                        "in the one-job order (default: the usable cores; 1: one process, in order)")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("--no-kernels", action="store_true", help="only the helper checks (no Triton)")
    scope.add_argument("--symbolic-all", action="store_true",
                       help="prove sglang's Triton kernels symbolically for every listed specialization "
                       "(kernel.symbolic_proof rows; about 6 minutes more on 2 cores) instead of one per kernel")
    p.set_defaults(func=cmd_audit_sglang)
    register_vllm(targets)
