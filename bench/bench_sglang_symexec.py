"""Proof time per specialization of sglang's own Triton kernels, as a Markdown table.

    python bench/bench_sglang_symexec.py [--all [--record]] [--kernel draft_kv|tree] [--sglang-path DIR] [--json PATH]
    python bench/bench_sglang_symexec.py --kv-envelope [--sample N] [--json PATH]

The kernels are read from the installed sglang (or DIR) by path; the specializations are
the audit's (``specbound.engines.sglang.kernel_proofs.kv_specs`` / ``tree_specs``; ``--all``: every one,
and the tree's two envelope proofs ``tree_symbolic.specs()``, kernel ``tree-envelope``).
After the table: per kernel, the declared preconditions and the axioms its proofs used
(``--json``: per theorem).  ``--all --record`` writes the verdicts into the manifest's
``sglang_theorems`` (``specbound.manifest.record_sglang``; with ``--kernel``, the other
kernel's entries keep their verdicts).  ``--kv-envelope`` proves the draft kv kernel at every
specialization sglang's launch sites pick over the serving envelope
(``specbound.engines.sglang.envelope.kv_specs``, 864 for sglang 0.5.23; hours on a 2-core machine), or
at ``--sample N`` of them spread evenly over that list, and prints the measured total and,
for a sample, the mean per specialization times the full count (not recorded in the manifest:
those ids are not in the registry).
"""

from __future__ import annotations

import argparse
import json
import resource
import time

from specbound.engines.sglang.locate import locate
from specbound.engines.sglang.kernel_proofs import KV_FILES, TREE_FILES, kv_specs, sglang_width, tree_specs
from specbound.engines.sglang import draft_kv_model as sglang_draft_kv
from specbound.engines.sglang import tree_model as sglang_tree
from specbound.engines.sglang import tree_symbolic as sglang_tree_symbolic


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--all", action="store_true", help="every specialization (default: the audit's subset)")
    ap.add_argument("--sglang-path", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--kernel", choices=("draft_kv", "tree", "tree-envelope"), default=None, help="only this kernel")
    ap.add_argument("--record", action="store_true", help="with --all: write the verdicts into proofs/manifest.json")
    ap.add_argument("--kv-envelope", action="store_true", help="the kv kernel at every envelope specialization")
    ap.add_argument("--sample", type=int, default=None, help="with --kv-envelope: N specializations spread evenly")
    args = ap.parse_args()
    if args.record and (not args.all or args.kv_envelope):
        ap.error("--record needs --all (the manifest lists every specialization)")
    from specbound.audit.extract import SourceIndex

    root = locate(args.sglang_path).root
    index = SourceIndex(root)
    width_fn, _where = sglang_width(index)
    host = sglang_draft_kv.Host(width_fn=width_fn) if width_fn else sglang_draft_kv.Host()
    rows, every = [], []
    kv_list = kv_specs(args.all)
    if args.kv_envelope:
        from specbound.engines.sglang import envelope

        kv_list = envelope.kv_specs()
        if args.sample:
            step = max(1, len(kv_list) // args.sample)
            kv_list = kv_list[::step][:args.sample]
        args.kernel = "draft_kv"
    for kind, mod, files, specs, prove in (
            ("draft_kv", sglang_draft_kv, KV_FILES, kv_list,
             lambda sp, p: sglang_draft_kv.prove(sp, p, host)),
            ("tree", sglang_tree, TREE_FILES, tree_specs(args.all), lambda sp, p: sglang_tree.prove(sp, p)),
            # IN-BOUNDS and NO-WRAP for every (K, D, n) of the envelope, one proof per mode
            ("tree-envelope", sglang_tree_symbolic, TREE_FILES, sglang_tree_symbolic.specs() if args.all else [],
             lambda sp, p: sglang_tree_symbolic.prove(sp, p))):
        if args.kernel not in (None, kind):
            continue
        path = str(index.find(mod.KERNEL, files).path)
        for sp in specs:
            start, cpu = time.perf_counter(), time.process_time()
            results = prove(sp, path)
            every += results
            row = {"kernel": kind, "spec": sp.label, "wall_s": round(time.perf_counter() - start, 1),
                   "cpu_s": round(time.process_time() - cpu, 1),
                   "ok": all(r.ok for r in results),
                   "obligations": sum(r.witness.get("obligations", 0) for r in results),
                   "seconds": {_prop(r.id): round(r.seconds, 1) for r in results},
                   # what each theorem's proofs rest on, read from them
                   "rests_on": {_prop(r.id): {"preconditions": sorted(set(r.hypotheses_used) & set(r.preconditions)),
                                              "axioms": sorted(r.axioms_used)} for r in results}}
            rows.append(row)
            print(f"{kind} {sp.label}: {row['wall_s']} s wall, {row['cpu_s']} s CPU, ok={row['ok']}", flush=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 / 1024
    print(markdown(rows))
    for kind in dict.fromkeys(r["kernel"] for r in rows):
        used = {part: sorted({n for r in rows if r["kernel"] == kind for t in r["rests_on"].values() for n in t[part]})
                for part in ("preconditions", "axioms")}
        print(f"\n{kind}: preconditions used: {', '.join(used['preconditions'])}; "
              f"axioms used: {', '.join(used['axioms'])}")
    print(f"\npeak memory {peak:.2f} GB")
    if args.kv_envelope:
        from specbound.engines.sglang import envelope

        total, full = sum(r["wall_s"] for r in rows), len(envelope.kv_specs())
        print(f"kv envelope: {len(rows)} of {full} specializations in {total:.0f} s; at that mean, all {full}: "
              f"{total / max(1, len(rows)) * full / 3600:.1f} h")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if args.record:
        from specbound import manifest

        written, problems = manifest.record_sglang(every)
        manifest.dump(written)
        print("\n".join(problems) or f"recorded {len(every)} sglang theorems in {manifest.PATH}")
        if problems:
            return 1
    return 0 if all(r["ok"] for r in rows) else 1


def _prop(theorem_id: str) -> str:
    from specbound.proofs.symexec.theorems import PROPERTIES
    name = theorem_id.split("[")[0]
    return next(p for p in PROPERTIES if name.endswith("-" + p))


def markdown(rows) -> str:
    props = ["IN-BOUNDS", "NO-WRAP", "NO-TRUNCATION", "RACE-FREE", "FOOTPRINT", "WALK-BOUNDED"]
    out = ["| kernel | specialization | " + " | ".join(props) + " | total s | obligations | verdict |",
           "|---|---|" + "---|" * (len(props) + 3)]
    for r in rows:
        cells = [str(r["seconds"].get(p, "")) for p in props]
        out.append(f"| {r['kernel']} | {r['spec']} | " + " | ".join(cells)
                   + f" | {r['wall_s']} | {r['obligations']} | {'proved' if r['ok'] else 'NOT proved'} |")
    return "\n".join(out)


if __name__ == "__main__":
    raise SystemExit(main())
