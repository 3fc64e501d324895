"""Plain-text tables for the command line."""

from __future__ import annotations


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h))
              for i, h in enumerate(headers)]
    line = "  ".join(str(h).ljust(w) for h, w in zip(headers, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(out)


HYPOTHESES_WIDTH = 60  # the full lists are in --json and docs/invariants.md
AXIOMS_WIDTH = 40


def _names(names: list[str], width: int) -> str:
    text = f"{len(names)}: " + ", ".join(names)
    if len(text) <= width:
        return text
    return text[:width - 3].rsplit(",", 1)[0] + ", ..."


def prove_table(results) -> str:
    """One row per theorem: verdict, cost, the hypotheses (preconditions) and axioms its proof
    rests on (read from the Proof), and the mutants it kills."""
    rows = []
    for r in results:
        killed = sum(m.status == "refuted" for m in r.mutants)
        rows.append([r.id, r.status if r.ok else f"{r.status} (NOT OK)", f"{r.seconds:.2f}",
                     str(r.rlimit), _names(r.hypotheses_used, HYPOTHESES_WIDTH),
                     _names(sorted(r.axioms_used), AXIOMS_WIDTH), f"{killed}/{len(r.mutants)}"])
    return table(["theorem", "verdict", "seconds", "rlimit", "hypotheses used", "axioms used", "mutants killed"],
                 rows)
