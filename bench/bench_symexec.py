"""Proof time per kernel specialization (symbolic executor), as JSON.

    python bench/bench_symexec.py [--all] [--no-mutants] [--json PATH]
    python bench/bench_symexec.py --markdown PATH     # table of a saved JSON run (no proving)

``--markdown`` of a ``specbound prove --kernels --all --json`` report prints the table of
``docs/kernel-proofs.md`` (``specbound.manifest_docs``: seconds from the report, the rest from
``proofs/manifest.json``; ``specbound docs --timings PATH`` writes it into the docs).
"""

from __future__ import annotations

import argparse
import json
import time

from specbound.proofs.symexec import theorems


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--all", action="store_true", help="every specialization (default: the pytest subset)")
    ap.add_argument("--no-mutants", action="store_true")
    ap.add_argument("--json", default=None)
    ap.add_argument("--markdown", default=None, help="print the table of a saved --json run and exit")
    ap.add_argument("--select", default=None,
                    help="only these specializations, as kind:index,... (indices into the selected set)")
    args = ap.parse_args()
    if args.markdown:
        with open(args.markdown) as f:
            data = json.load(f)
        if isinstance(data, dict):
            from specbound import manifest, manifest_docs
            print(manifest_docs.specializations_table(manifest.load(), manifest_docs.report_seconds(data)))
        else:
            print(markdown(data))
        return 0
    rows = []
    chosen = None
    if args.select:
        chosen = {(k, int(i)) for k, i in (x.split(":") for x in args.select.split(","))}
    for kind, specs in theorems.selected_specs(args.all).items():
        for i, sp in enumerate(specs):
            if chosen is not None and (kind, i) not in chosen:
                continue
            start = time.perf_counter()
            results = theorems.prove_kernel(kind, sp, mutants=(theorems.carries_mutants(kind, sp) and not args.no_mutants))
            row = {"kernel": kind, "index": i, "spec": sp.label, "wall_s": round(time.perf_counter() - start, 2),
                   "theorems": {r.id.split("[")[0]: {"status": r.status, "seconds": round(r.seconds, 2),
                                                     "obligations": r.witness.get("obligations"),
                                                     "mutants": {m.id: m.status for m in r.mutants},
                                                     **({"detail": r.detail[:500]} if r.status != "proved" else {})}
                                for r in results}}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


PROPS = tuple(theorems.PROPERTIES)


def markdown(rows) -> str:
    """One line per specialization of this script's own rows: seconds per property (``!`` marks a
    property not proved)."""
    head = "| kernel | specialization | " + " | ".join(PROPS) + " | wall s | mutants |"
    out = [head, "|" + "---|" * (len(PROPS) + 4)]
    for row in rows:
        cells = []
        for prop in PROPS:
            th = next((v for k, v in row["theorems"].items() if k.endswith("-" + prop)), None)
            cells.append("" if th is None else f"{th['seconds']:.1f}" + ("" if th["status"] == "proved" else f" ! {th['status']}"))
        muts = [f"{m}: {st}" for th in row["theorems"].values() for m, st in th["mutants"].items()]
        name = theorems.kernel_name(next(iter(row["theorems"]), "KERNEL-?")).split("-", 1)[1]
        out.append(f"| {name} | {row['spec']} | " + " | ".join(cells) + f" | {row['wall_s']:.1f} | "
                   + ("; ".join(muts) or "") + " |")
    return "\n".join(out)


if __name__ == "__main__":
    raise SystemExit(main())
