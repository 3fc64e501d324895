"""``specbound prove --explain ID``: what a theorem claims, in words, and what the committed
manifest records it rests on (verdict, axioms, the mutants it refutes); nothing is proved."""

from __future__ import annotations

import textwrap


def _wrap(label: str, text: str) -> list[str]:
    return textwrap.wrap(text, width=96, initial_indent=f"  {label:9s} ", subsequent_indent=" " * 12)


def _recorded(tid: str) -> dict:
    from specbound import manifest
    try:
        m = manifest.load()
    except (OSError, ValueError):
        return {}
    return m["spec_theorems"].get(tid) or m["kernel_theorems"].get(tid) or {}


def explain(tid: str) -> str:
    """The claim of spec or kernel theorem ``tid`` (an id ``prove --only`` accepts)."""
    from specbound.proofs import registry
    lines = [tid]
    spec = {th.id: th for th in registry.theorems()}
    if tid in spec:
        th = spec[tid]
        lines += _wrap("family", th.family) + _wrap("claims", th.statement)
        mutants = [f"{m.id} ({m.description})" for m in th.mutants]
    else:
        from specbound.proofs.symexec.theorems import PROPERTIES, theorem_ids
        kind, _, sp = theorem_ids(full=True)[tid]
        prop = tid.split("[", 1)[0][len(f"KERNEL-{sp.name}-"):]
        lines += _wrap("kernel", f"{sp.name} ({kind}), specialization {sp.label}")
        lines += _wrap("claims", PROPERTIES[prop][1])
        mutants = []
    entry = _recorded(tid)
    if entry:
        lines += _wrap("verdict", f"{entry.get('verdict')} (proofs/manifest.json)")
        lines += _wrap("axioms", ", ".join(entry.get("axioms", [])) or "none")
        if isinstance(entry.get("mutants"), dict):   # a kernel theorem's: mutant -> how its replay refutes it
            mutants = [f"{m} (refuted by {how})" for m, how in entry["mutants"].items()]
    lines += _wrap("mutants", "; ".join(mutants) or "none on this specialization")
    return "\n".join(lines)
