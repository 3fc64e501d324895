"""The release matrix: ``specbound audit vllm`` on several vLLM releases, each fetched once
into the cache (``pip download --no-deps``, ``.py`` files only: :func:`.locate.fetch`), and per
theorem the releases it is proved / refuted in, with since/until for each status.

    python -m specbound.engines.vllm.matrix 0.31.0 0.32.0 0.33.0 [--json PATH]

Downloads are this script's alone (336 MB a wheel); the test suite never runs it on the network.
"""

from __future__ import annotations

import argparse
import json
from .audit import run_audit
from . import locate


def matrix(trees: dict) -> dict:
    """``{version: vLLM tree}`` -> ``{theorem id: {version: status}}`` (a kernel a release lacks:
    its rows are ``error`` there)."""
    out: dict = {}
    for version, tree in trees.items():
        for row in run_audit(tree).rows:
            out.setdefault(row.id, {})[version] = row.status
    return out


def spans(table: dict, versions: list) -> dict:
    """Per theorem, each status with its runs of consecutive releases ``[(since, until), ...]``."""
    res = {}
    for tid, by_version in table.items():
        runs: dict = {}
        prev = None
        for v in versions:
            s = by_version.get(v)
            if s is not None:
                if s == prev:
                    runs[s][-1] = (runs[s][-1][0], v)
                else:
                    runs.setdefault(s, []).append((v, v))
            prev = s
        res[tid] = runs
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m specbound.engines.vllm.matrix", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("versions", nargs="+")
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    trees = {v: locate.fetch(v) for v in args.versions}
    table = matrix(trees)
    for tid, by_status in spans(table, args.versions).items():
        print(tid, "; ".join(f"{s}: " + ", ".join(f"{a}..{b}" for a, b in runs) for s, runs in by_status.items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"versions": args.versions, "table": table}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
