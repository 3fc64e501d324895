"""The release matrix: ``specbound audit vllm`` on several vLLM releases, each fetched once
into the cache (``pip download --no-deps``, ``.py`` files only: :func:`.locate.fetch`), and per
theorem the releases it is proved / refuted in, with since/until for each status.

    python -m specbound.engines.vllm.matrix 0.31.0 0.32.0 0.33.0 [--json PATH]

Downloads are this script's alone (336 MB a wheel); the test suite never runs it on the network.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import pathlib
import time

from . import contract, locate
from .audit import run_audit


def kernel_digest(tree) -> str:
    """A digest of the release's kernel functions (their ASTs: comments and layout aside).
    The audit reads nothing else of a release, so two releases with one digest have one
    set of verdicts."""
    root = locate.package_root(tree)
    h = hashlib.sha256()
    for k in contract.KERNELS:
        f = pathlib.Path(root) / k.file
        fn = contract.kernel_def(k.name, f.read_text()) if f.is_file() else None
        h.update(f"{k.name}:{ast.dump(fn) if fn else '-'}\n".encode())
    return h.hexdigest()[:12]


def matrix(trees: dict, seconds: dict | None = None, same: dict | None = None) -> dict:
    """``{version: vLLM tree}`` -> ``{theorem id: {version: status}}`` (a kernel whose
    signature the table does not model: one ``error`` row naming the difference; a kernel
    the release lacks: no rows).  A release whose kernels are those of an earlier one
    (:func:`kernel_digest`) takes its verdicts without a second audit; ``same``, when given,
    receives ``{version: the audited release}``.  ``seconds`` receives each audited release's
    audit wall and CPU time."""
    out: dict = {}
    audited: dict = {}
    for version, tree in trees.items():
        digest = kernel_digest(tree)
        if digest in audited:
            if same is not None:
                same[version] = audited[digest]
            for by_version in out.values():
                if audited[digest] in by_version:
                    by_version[version] = by_version[audited[digest]]
            continue
        audited[digest] = version
        wall, cpu = time.perf_counter(), time.process_time()
        for row in run_audit(tree).rows:
            out.setdefault(row.id, {})[version] = row.status
        if seconds is not None:
            seconds[version] = (round(time.perf_counter() - wall, 1), round(time.process_time() - cpu, 1))
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
    seconds: dict = {}
    same: dict = {}
    table = matrix(trees, seconds, same)
    for v, (wall, cpu) in seconds.items():
        print(f"{v}: audit {wall} s wall, {cpu} s CPU", flush=True)
    for v, w in same.items():
        print(f"{v}: the kernels of {w}")
    for tid, by_status in spans(table, args.versions).items():
        print(tid, "; ".join(f"{s}: " + ", ".join(f"{a}..{b}" for a, b in runs) for s, runs in by_status.items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"versions": args.versions, "table": table, "seconds": seconds, "same": same}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
