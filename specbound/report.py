"""Plain-text tables for the command line."""

from __future__ import annotations


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h))
              for i, h in enumerate(headers)]
    line = "  ".join(str(h).ljust(w) for h, w in zip(headers, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(out)


def _kernel_parts(tid: str):
    """``KERNEL-<kernel>-<property>[<constexprs>]`` -> (``KERNEL-<kernel>``, property, constexprs), or None."""
    if not tid.startswith("KERNEL-") or "[" not in tid:
        return None
    from specbound.proofs.symexec.theorems import PROPERTIES
    name, label = tid.split("[", 1)
    prop = next((p for p in PROPERTIES if name.endswith("-" + p)), None)
    return (name[: -len(prop) - 1], prop, label.rstrip("]")) if prop else None


def prove_table(results) -> str:
    """One row per theorem: verdict, cost, the mutants it kills and how many hypotheses
    (preconditions) and axioms its proof rests on (read from the Proof; the names are in --json
    and ``prove --explain ID``).  Kernel theorems sit under a heading per specialization, the
    row naming the property, so that no line is wider than 100 columns."""
    headers = ["theorem", "verdict", "seconds", "rlimit", "mutants", "hyps", "axioms"]
    rows, headings = [], {}
    group = None
    for r in results:
        name, parts = r.id, _kernel_parts(r.id)
        if parts:
            kernel, prop, label = parts
            if (kernel, label) != group:
                group = (kernel, label)
                headings[len(rows)] = f"{kernel}-<property>[{label}]"
            name = "  " + prop
        else:
            group = None
        killed = sum(m.status == "refuted" for m in r.mutants)
        rows.append([name, r.status if r.ok else f"{r.status} (NOT OK)", f"{r.seconds:.2f}", str(r.rlimit),
                     f"{killed}/{len(r.mutants)}", str(len(r.hypotheses_used)), str(len(r.axioms_used))])
    lines = table(headers, rows).splitlines()
    out = lines[:2]
    for i, line in enumerate(lines[2:]):
        if i in headings:
            out.append(headings[i])
        out.append(line.rstrip())
    return "\n".join(out)
