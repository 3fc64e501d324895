"""Replay one case of the CUDA tree-build audit:

    python -m specbound.engines.sglang.cuda.replay [--sglang-path DIR] --kernel NAME 'CASE_JSON'

CASE_JSON is a row's ``replay`` (a ``TreeCase``).  A case with planted defects is launched
once and compared with the guarded semantics; a valid one gets the four launches of the
audit.  A case whose mask is too large to allocate (the int32 wrap) is launched once on a
lazily mapped mask.  Prints the finding (or "no finding") and exits 1 on a finding, 2 when
the harness cannot run.
"""

from __future__ import annotations

import argparse
import sys
from specbound.engines.sglang.locate import NotInstalled, locate
from .harness import Session
from .tree import cell_bytes, extents, make_launch, prefilled, run_case

LAZY_MASK_BYTES = 1 << 28        # above this, the mask is a lazy mapping and is not compared


def main(argv: list[str] | None = None) -> int:
    from specbound.fuzz.records import case_from_json

    from .check import prepare

    ap = argparse.ArgumentParser(prog="python -m specbound.engines.sglang.cuda.replay", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sglang-path", metavar="DIR", help="the sglang package (default: the installed one)")
    ap.add_argument("--kernel", required=True, help="build_tree_efficient or build_tree_efficient_partial_packed")
    ap.add_argument("case", help="the row's replay JSON")
    args = ap.parse_args(argv)
    try:
        root = locate(args.sglang_path).root
    except NotInstalled as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    case = case_from_json(args.case)
    prep = prepare(root)
    if args.kernel not in prep.kernels:
        status, detail = prep.problems.get(args.kernel, ("not present", f"no kernel {args.kernel!r}"))
        print(f"error: {args.kernel}: {status}: {detail}", file=sys.stderr)
        return 2
    kernel = prep.kernels[args.kernel]
    with Session(prep.libraries[args.kernel]) as session:
        if extents(case)["tree_mask"] * cell_bytes(case.tree_mode, case.num_draft_tokens) > LAZY_MASK_BYTES:
            out = session.run(make_launch(kernel, case, prefilled(case, "sglang", mask=False)))
            finding = None if out.ok else out
        else:
            finding = run_case(session, kernel, case, malformed=bool(case.defects))
    if finding is None:
        print("no finding")
        return 0
    print(f"{finding.kind}: {finding.message}")
    for line in finding.printed[:5]:
        print(f"  kernel printed: {line}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
