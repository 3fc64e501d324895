"""``proofs/manifest.json``: every theorem id the project expects, its verdict and the mutants
it must refute, committed and checked (in the spirit of the TLA+ examples' ``manifest.json``).

Three checks read it:

* :func:`check_registries` (cheap, no proving): the ids the registries enumerate today (the
  spec theorems and their mutants, every covered kernel specialization x property with the
  mutants its first specialization carries, the kernel properties without a mutant, sglang's
  kernel theorems, the spec mutants the fuzz replays on the kernels) against the manifest;
  a rename in a registry reads as one id missing and one new, paired as "renamed?".
* :func:`compare_results`: verdicts, refuted mutants (with the kernel mutants' replay kind) and
  obligation counts of theorems actually proved, against their entries (pytest's default
  subset, ``specbound prove``).
* :func:`check_report`: a saved full ``specbound prove --kernels --all --json`` report, every
  entry and the summary totals.

:func:`write` makes the manifest from such a report.  No timings go in (they stay in
``bench/results``); ordering is the registries' own, so a regenerated manifest diffs cleanly.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path

import specbound.proofs

PATH = Path(specbound.proofs.__file__).resolve().parent / "manifest.json"
SGLANG_SOURCE = ("sglang 0.5.23, every specialization of `specbound audit sglang --symbolic-all` "
                 "and the tree's two envelope proofs (`bench/bench_sglang_symexec.py --all --record --kernel "
                 "tree-envelope`) (recorded in docs/kernel-proofs.md, 'sglang's own kernels'); pytest re-proves the "
                 "default one per kernel against these entries")


def load(path: Path | str | None = None) -> dict:
    return json.loads(Path(path or PATH).read_text())


def dump(manifest: dict, path: Path | str | None = None) -> None:
    Path(path or PATH).write_text(json.dumps(manifest, indent=1) + "\n")


# --- what the registries enumerate today ----------------------------------------------------------

def enumerate_registries() -> dict:
    """Every expected id, read from the registries (nothing is proved): the same sections as
    the manifest, with the fields a registry knows (no verdicts)."""
    from specbound.engines.sglang.kernel_proofs import kv_specs as sglang_kv_specs
    from specbound.engines.sglang.kernel_proofs import tree_specs as sglang_tree_specs
    from specbound.fuzz.replay import SIZING_MUTANTS
    from specbound.proofs import registry
    from specbound.engines.sglang import draft_kv_model as sglang_draft_kv, tree_model as sglang_tree
    from specbound.engines.sglang import tree_symbolic as sglang_tree_symbolic
    from specbound.proofs.symexec import mutants as kernel_mutants
    from specbound.proofs.symexec import theorems
    from specbound.proofs.symexec import verifiers

    spec = {th.id: {"family": th.family, "mutants": {m.id: None for m in th.mutants}} for th in registry.theorems()}
    kernel = {}
    for kind, specs in theorems.all_specs().items():
        props = verifiers.get(kind).properties
        mutants = kernel_mutants.of_kind(kind)
        for sp in specs:
            for prop in props:
                carried = {m.id: None for m in mutants if m.prop == prop and theorems.runs_on(m, sp)} \
                    if theorems.carries_mutants(kind, sp) else {}
                kernel[f"KERNEL-{sp.name}-{prop}[{sp.label}]"] = {
                    "kind": kind, "kernel": sp.name, "specialization": sp.label, "property": prop,
                    "mutants": carried}
    without = {f"{kind}/{prop}": reason for (kind, prop), reason in theorems.WITHOUT_MUTANT.items()}
    sglang = {}
    for module, specs in ((sglang_draft_kv, sglang_kv_specs(True)), (sglang_tree, sglang_tree_specs(True)),
                          (sglang_tree_symbolic, sglang_tree_symbolic.specs())):   # its two properties only
        for sp in specs:
            for prop in module.PROPERTIES:
                sglang[f"KERNEL-{sp.name}-{prop}[{sp.label}]"] = {"kernel": sp.name, "specialization": sp.label,
                                                                  "property": prop}
    replays = {f"{th}/{m}": None for th, m in sorted(SIZING_MUTANTS)}
    return {"spec_theorems": spec, "kernel_theorems": kernel, "kernel_without_mutant": without,
            "sglang_theorems": sglang, "spec_mutant_replays": replays}


def families_without_mutant(manifest: dict) -> list[str]:
    """``KERNEL/PROPERTY`` of every kernel x property family (each layout its own kernel, e.g.
    ``BUILD-TREE-QLEN``) whose theorems refute no mutant in any specialization, unless its
    ``kind/property`` carries a documented reason in ``kernel_without_mutant``: a family that
    is never shown to fail could be checking nothing."""
    refuting, exempt = {}, manifest.get("kernel_without_mutant", {})
    for e in manifest["kernel_theorems"].values():
        if f"{e['kind']}/{e['property']}" in exempt:
            continue
        key = f"{e['kernel']}/{e['property']}"
        refuting[key] = refuting.get(key, False) or bool(e["mutants"])
    return sorted(k for k, ok in refuting.items() if not ok)


# --- comparing ------------------------------------------------------------------------------------

def _renames(missing: list, added: list) -> tuple[list, list, list]:
    """Pair ids that look like one renamed (closest spelling); the rest stay missing/added."""
    pairs, added = [], list(added)
    rest = []
    for old in missing:
        close = difflib.get_close_matches(old, added, n=1, cutoff=0.6)
        if close:
            pairs.append((old, close[0]))
            added.remove(close[0])
        else:
            rest.append(old)
    return pairs, rest, added


def diff_ids(what: str, expected, actual) -> list[str]:
    """Readable lines for the ids of ``expected`` (the manifest) not in ``actual`` (today) and back."""
    exp, act = list(expected), list(actual)
    missing = [i for i in exp if i not in set(act)]
    added = [i for i in act if i not in set(exp)]
    pairs, missing, added = _renames(missing, added)
    out = [f"{what}: renamed? {old} (manifest) -> {new} (today)" for old, new in pairs]
    out += [f"{what}: missing {i} (in the manifest, not there today)" for i in missing]
    out += [f"{what}: new {i} (there today, not in the manifest)" for i in added]
    return out


def check_registries(manifest: dict | None = None, today: dict | None = None) -> list[str]:
    """The manifest against the registries' enumeration: one line per difference (empty: agree)."""
    manifest = load() if manifest is None else manifest
    today = enumerate_registries() if today is None else today
    problems = []
    for section in ("spec_theorems", "kernel_theorems", "sglang_theorems", "kernel_without_mutant",
                    "spec_mutant_replays"):
        want, have = manifest.get(section, {}), today[section]
        problems += diff_ids(section, want, have)
        for tid in want:
            if tid in have and isinstance(have[tid], dict) and "mutants" in have[tid]:
                problems += diff_ids(f"{tid} mutants", want[tid].get("mutants", {}), have[tid]["mutants"])
    return problems


def _entry_of_result(r) -> dict:
    """A TheoremResult (or its JSON form) in the manifest's terms."""
    get = (lambda k: r[k]) if isinstance(r, dict) else (lambda k: getattr(r, k))
    status, ok = get("status"), get("ok")
    out = {"verdict": status if ok else f"{status} (not ok)"}
    muts = {}
    for m in get("mutants"):
        mid, mst, cex = (m["id"], m["status"], m["counterexample"]) if isinstance(m, dict) else \
            (m.id, m.status, m.counterexample)
        muts[mid] = (cex or {}).get("replay", "counterexample") if mst == "refuted" else mst
    out["mutants"] = muts
    # The axioms a proof rests on are assumed, not checked: a new one (a launch contract added
    # to a verifier, a definition renamed) must show up as a difference, not slip in.
    out["axioms"] = sorted(get("axioms_used") or {})
    witness = get("witness") or {}
    if "obligations" in witness and get("id").startswith("KERNEL-"):
        out["obligations"], out["dead"] = witness["obligations"], witness.get("dead", 0)
    return out


def _lookup(manifest: dict, tid: str):
    for section in ("spec_theorems", "kernel_theorems", "sglang_theorems"):
        if tid in manifest.get(section, {}):
            return manifest[section][tid]
    return None


def compare_results(results, manifest: dict | None = None) -> list[str]:
    """Theorems actually proved (TheoremResults or their JSON form) against their entries:
    verdict, the mutants refuted and how (a kernel mutant's replay kind), obligation counts."""
    manifest = load() if manifest is None else manifest
    problems = []
    for r in results:
        tid = r["id"] if isinstance(r, dict) else r.id
        entry = _lookup(manifest, tid)
        if entry is None:
            problems.append(f"{tid}: proved here, not in the manifest")
            continue
        got = _entry_of_result(r)
        if got["verdict"] != entry["verdict"]:
            problems.append(f"{tid}: verdict {got['verdict']}, the manifest expects {entry['verdict']}")
        want_m = entry.get("mutants", {})
        want_m = want_m if isinstance(want_m, dict) else {m: "counterexample" for m in want_m}
        if "mutants" in entry or got["mutants"]:
            problems += diff_ids(f"{tid} mutants", want_m, got["mutants"])
            for mid, how in got["mutants"].items():
                if mid in want_m and how != want_m[mid]:
                    problems.append(f"{tid}: mutant {mid} {how}, the manifest expects {want_m[mid]}")
        for key in ("obligations", "dead"):
            if key in entry and got.get(key) != entry[key]:
                problems.append(f"{tid}: {got.get(key)} {key}, the manifest expects {entry[key]}")
        if "axioms" in entry and got["verdict"] == "proved" and got["axioms"] != entry["axioms"]:
            problems.append(f"{tid}: rests on axioms {got['axioms']}, the manifest expects {entry['axioms']}")
    return problems


def expected_totals(manifest: dict) -> dict:
    """The summary a full ``specbound prove --kernels --all`` run must report."""
    entries = [*manifest["spec_theorems"].values(), *manifest["kernel_theorems"].values()]
    mutants = sum(len(e["mutants"]) for e in entries)
    return {"theorems": len(entries), "proved": sum(e["verdict"] == "proved" for e in entries),
            "failed": sum(e["verdict"] != "proved" for e in entries), "mutants_refuted": mutants,
            "mutants_survived": 0}


def check_report(payload: dict, manifest: dict | None = None) -> list[str]:
    """A saved full ``specbound prove --kernels --all --json`` report against the manifest:
    every theorem there and nothing else, each entry, and the summary totals."""
    manifest = load() if manifest is None else manifest
    if payload.get("partial"):
        return [f"the report is partial ({payload['partial']}): the run was cut short"]
    ids = [th["id"] for th in payload["theorems"]]
    problems = diff_ids("report theorems", [*manifest["spec_theorems"], *manifest["kernel_theorems"]], ids)
    problems += compare_results(payload["theorems"], manifest)
    summary = {**payload["summary"], "theorems": len(ids)}
    for key, want in manifest["totals"]["prove_kernels_all"].items():
        if summary.get(key) != want:
            problems.append(f"report totals: {key} = {summary.get(key)}, the manifest expects {want}")
    return problems


# --- writing --------------------------------------------------------------------------------------

def write(payload: dict, replays: list, previous: dict | None = None) -> tuple[dict, list[str]]:
    """The manifest of a full ``prove --kernels --all`` report and the fuzz's spec-mutant replays
    (``specbound.fuzz.replay.replay_all()``), with the problems that forbid writing it (the
    report's ids must be exactly what the registries enumerate).  sglang's theorems are not in
    the report: their verdicts carry over from ``previous`` (``SGLANG_SOURCE`` says where they
    were recorded); a new one is written ``not run``, which no check accepts."""
    today = enumerate_registries()
    by_id = {th["id"]: th for th in payload["theorems"]}
    problems = [] if not payload.get("partial") else [f"the report is partial ({payload['partial']})"]
    problems += diff_ids("report theorems", [*today["spec_theorems"], *today["kernel_theorems"]], list(by_id))
    spec = {tid: {"family": e["family"], **_entry_of_result(by_id[tid])}
            for tid, e in today["spec_theorems"].items() if tid in by_id}
    for e in spec.values():   # a spec mutant is refuted by a Z3 counterexample: its id says it all
        e["mutants"] = [m for m, how in e["mutants"].items() if how == "counterexample"] \
            if all(how == "counterexample" for how in e["mutants"].values()) else e["mutants"]
    kernel = {}
    for tid, e in today["kernel_theorems"].items():
        if tid in by_id:
            got = _entry_of_result(by_id[tid])
            kernel[tid] = {k: e[k] for k in ("kind", "kernel", "specialization", "property")} | got
    prev_sglang = (previous or {}).get("sglang_theorems", {})
    sglang = {tid: {**e, "verdict": prev_sglang.get(tid, {}).get("verdict", "not run")}
              for tid, e in today["sglang_theorems"].items()}
    replay_status = {f"{r.theorem}/{r.mutant}": r.status for r in replays}
    problems += diff_ids("spec mutant replays", today["spec_mutant_replays"], replay_status)
    manifest = {
        "about": "Expected theorem ids, verdicts and refuted mutants (specbound/manifest.py). Written by "
                 "`specbound manifest --write --report PATH` from a full `specbound prove --kernels --all "
                 "--json PATH`; checked by `specbound manifest --check`, `specbound docs --check` and pytest. "
                 "No timings: those stay in bench/results.",
        "sglang_source": SGLANG_SOURCE,
        "spec_theorems": spec,
        "kernel_theorems": kernel,
        "kernel_without_mutant": today["kernel_without_mutant"],
        "sglang_theorems": sglang,
        "spec_mutant_replays": {k: replay_status.get(k, "not run") for k in today["spec_mutant_replays"]},
    }
    manifest["totals"] = totals(manifest)
    problems += compare_results(payload["theorems"], manifest)   # a failed verdict is written, and named
    return manifest, problems


def record_sglang(results, manifest: dict | None = None) -> tuple[dict, list[str]]:
    """The manifest with its ``sglang_theorems`` section rewritten: the ids the registries
    enumerate today, each with the verdict of ``results`` (TheoremResults of sglang's kernel
    proofs, e.g. ``bench/bench_sglang_symexec.py --all --record``); an id no result covers keeps
    its previous verdict (as :func:`write` does), a new one is written ``not run`` (no check
    accepts it), and every id not proved is a problem.  The other sections are left as they
    are; the totals are recomputed."""
    manifest = dict(load() if manifest is None else manifest)
    got = {r.id: _entry_of_result(r)["verdict"] for r in results}
    previous = manifest.get("sglang_theorems", {})
    today = enumerate_registries()["sglang_theorems"]
    manifest["sglang_theorems"] = {
        tid: {**e, "verdict": got.get(tid, previous.get(tid, {}).get("verdict", "not run"))} for tid, e in today.items()}
    problems = [f"{tid}: {e['verdict']}" for tid, e in manifest["sglang_theorems"].items() if e["verdict"] != "proved"]
    problems += [f"{tid}: proved here, not enumerated by the registries" for tid in got if tid not in today]
    manifest["totals"] = totals(manifest)
    return manifest, problems


def totals(manifest: dict) -> dict:
    kernel = manifest["kernel_theorems"].values()
    specs = {}
    for e in kernel:
        specs.setdefault(e["kind"], set()).add(e["specialization"] + e["kernel"])
    sglang = manifest["sglang_theorems"].values()
    return {
        "spec_theorems": len(manifest["spec_theorems"]),
        "spec_mutants": sum(len(e["mutants"]) for e in manifest["spec_theorems"].values()),
        "kernel_specializations": {kind: len(s) for kind, s in specs.items()},   # registry order
        "kernel_theorems": len(manifest["kernel_theorems"]),
        "kernel_mutants": sum(len(e["mutants"]) for e in kernel),
        "kernel_obligations": sum(e.get("obligations", 0) for e in kernel),
        "kernel_dead": sum(e.get("dead", 0) for e in kernel),
        "sglang_specializations": len({(e["kernel"], e["specialization"]) for e in sglang}),
        "sglang_theorems": len(manifest["sglang_theorems"]),
        "prove_kernels_all": expected_totals(manifest),
    }
