"""Proof time per kernel specialization (symbolic executor, issue 6), as JSON.

    python bench/bench_symexec.py [--all] [--no-mutants] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--all", action="store_true", help="every specialization (default: the pytest subset)")
    ap.add_argument("--no-mutants", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    from specbound.proofs.symexec import theorems as T

    rows = []
    for kind, specs in T.selected_specs(args.all).items():
        for i, sp in enumerate(specs):
            start = time.perf_counter()
            results = T.prove_kernel(kind, sp, mutants=(i == 0 and not args.no_mutants))
            row = {"kernel": kind, "spec": sp.label, "wall_s": round(time.perf_counter() - start, 2),
                   "theorems": {r.id.split("[")[0]: {"status": r.status, "seconds": round(r.seconds, 2),
                                                     "obligations": r.witness.get("obligations"),
                                                     "mutants": {m.id: m.status for m in r.mutants}}
                                for r in results}}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
