"""The ``specbound`` command line: prove, verify, docs, manifest, and the commands that feature modules register
(``specbound.fuzz.command``: fuzz; ``specbound.audit.command``: audit).

A feature module registers itself with ``register(subparsers)``; the fuzz module also provides
``verify_step(args) -> int``, the default fuzz budget that ``specbound verify`` runs after the proofs.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

FEATURE_MODULES = ("specbound.fuzz.command", "specbound.audit.command")

from specbound.spec import SpecArgumentError


def _write_json(path: str, payload: dict) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n")


def cmd_prove(args) -> int:
    from specbound.proofs import registry
    from specbound.report import prove_table

    results, seconds = registry.run_all(args.only)
    crashed = ""
    if getattr(args, "kernels", False):
        # Kernel theorems (issue 6): the symbolic executor reads the kernel sources by path;
        # torch/triton are imported only to replay mutants' counterexamples.
        import time

        from specbound.proofs.symexec import theorems as kernel_theorems

        start = time.perf_counter()
        spec_results = results

        def progress(done, total, kind, sp, new, so_far, spec_seconds):
            # One line per specialization on stderr, and the JSON so far (marked partial), so
            # a long --all run shows where it is and leaves its results if it is cut short.
            name = kernel_theorems.kernel_name(new[0].id) if new else kind
            print(f"[{done}/{total}] {name}[{sp.label}]: {sum(r.ok for r in new)}/{len(new)} proved "
                  f"in {spec_seconds:.1f} s", file=sys.stderr, flush=True)
            if args.json:
                partial = registry.to_json(spec_results + so_far, seconds + time.perf_counter() - start)
                _write_json(args.json, {**partial, "partial": f"{done}/{total} specializations"})
        try:
            results = results + kernel_theorems.run_all(full=args.all, progress=progress)
        except Exception as exc:   # e.g. a lemma refuted deep inside: still report every other theorem
            crashed = f"{type(exc).__name__}: {exc}"
        seconds += time.perf_counter() - start
    payload = registry.to_json(results, seconds)
    print(prove_table(results))
    s = payload["summary"]
    print(f"\n{s['proved']}/{len(results)} proved, {s['mutants_refuted']} mutants refuted, "
          f"{s['mutants_survived']} survived, {s['seconds']:.2f} s (z3 {payload['z3_version']})")
    for r in results:
        if not r.ok:
            print(f"FAILED {r.id}: {r.status} {r.detail}", file=sys.stderr)
            for m in r.mutants:
                if m.status != "refuted":
                    print(f"  mutant {m.id} survived: {m.note}", file=sys.stderr)
    if crashed:
        print(f"FAILED kernel.theorems: the kernel theorems stopped: {crashed}", file=sys.stderr)
    if args.json:
        _write_json(args.json, payload)
    off_manifest = _manifest_problems(args, results, payload, crashed)
    for line in off_manifest:
        print(f"FAILED manifest: {line}", file=sys.stderr)
    return 0 if s["failed"] == 0 and not crashed and not off_manifest else 1


def _manifest_problems(args, results, payload, crashed) -> list[str]:
    """Every theorem run against its ``proofs/manifest.json`` entry; a complete
    ``--kernels --all`` run is checked whole (every id there, and the summary totals)."""
    from specbound import manifest

    try:
        expected = manifest.load()
    except (OSError, ValueError) as exc:
        return [f"cannot read {manifest.PATH}: {exc}"]
    if getattr(args, "kernels", False) and getattr(args, "all", False) and not args.only and not crashed:
        return manifest.check_report(payload, expected)
    return manifest.compare_results(results, expected)


def cmd_docs(args) -> int:
    from specbound import docs, manifest_docs

    text = docs.render()
    target = Path(args.output)
    if args.check:
        rc = 0
        current = target.read_text() if target.exists() else ""
        if current != text:
            print(f"{target} is stale: run `specbound docs` and commit the result", file=sys.stderr)
            rc = 1
        else:
            print(f"{target} is up to date")
        for line in manifest_docs.stale():
            print(f"stale (generated from proofs/manifest.json; run `specbound docs`): {line}", file=sys.stderr)
            rc = 1
        if rc == 0:
            print("the tables and figures generated from proofs/manifest.json are up to date")
        return rc
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    print(f"wrote {target}")
    report = _read_json("--timings", args.timings) if args.timings else None
    for rel in manifest_docs.write(report=report):
        print(f"wrote {rel} (from proofs/manifest.json)")
    return 0


def _read_json(flag: str, path: str) -> dict:
    try:
        payload = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise SpecArgumentError(flag, f"cannot read a JSON report from {path}: {exc}") from None
    if not isinstance(payload, dict) or not isinstance(payload.get("theorems"), list):
        raise SpecArgumentError(flag, f"{path} is not a `specbound prove --json` report (no theorems list)")
    return payload


def cmd_manifest(args) -> int:
    """Check proofs/manifest.json against the registries (cheap) and, with --report, a saved full
    run; or write it from such a run."""
    from specbound import manifest

    if args.write:
        if not args.report:
            raise SpecArgumentError("--write", "needs --report PATH, a full `specbound prove --kernels --all "
                                               "--json PATH` report")
        from specbound.fuzz.replay import replay_all

        payload = _read_json("--report", args.report)
        previous = manifest.load() if manifest.PATH.exists() else None
        fresh, problems = manifest.write(payload, replay_all(), previous)
        for line in problems:
            print(f"FAILED: {line}", file=sys.stderr)
        if problems:
            print(f"{manifest.PATH} not written", file=sys.stderr)
            return 1
        for line in (manifest.compare_results(payload["theorems"], previous) if previous else []):
            print(f"changed: {line}")
        manifest.dump(fresh)
        print(f"wrote {manifest.PATH}: {json.dumps(fresh['totals'])}\n"
              f"regenerate the docs with `specbound docs --timings {args.report}`")
        return 0
    try:
        expected = manifest.load()
    except (OSError, ValueError) as exc:
        print(f"FAILED: cannot read {manifest.PATH}: {exc}", file=sys.stderr)
        return 1
    problems = manifest.check_registries(expected)
    if args.report:
        problems += manifest.check_report(_read_json("--report", args.report), expected)
    for line in problems:
        print(f"FAILED: {line}", file=sys.stderr)
    if problems:
        print(f"{len(problems)} difference(s) from {manifest.PATH}: fix the registry, or regenerate the manifest "
              "from a full run (`specbound manifest --write --report PATH`) and commit it", file=sys.stderr)
        return 1
    print(f"{manifest.PATH} agrees with the registries" + (f" and with {args.report}" if args.report else ""))
    return 0


def _feature(name: str):
    """A feature module, or None when it is not part of this installation."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            return None
        raise


def cmd_verify(args) -> int:
    """The main job: every theorem proved (the spec's, and the kernels' on the default subset of
    specializations), then the default fuzz budget; a missing fuzz is a failure, not a skip."""
    try:
        rc = cmd_prove(argparse.Namespace(only=None, json=args.json, kernels=not args.no_kernels, all=False))
    except Exception as exc:   # a crash inside a proof is a failed verify, not a usage error (exit 2)
        print(f"FAILED prove: {type(exc).__name__}: {exc}", file=sys.stderr)
        rc = 1
    fuzz = _feature("specbound.fuzz.command")
    if fuzz is not None and hasattr(fuzz, "verify_step"):
        rc = max(rc, fuzz.verify_step(args))
    else:   # an installation without the fuzz has not verified what verify promises
        print("FAILED fuzz: specbound.fuzz is not part of this installation; nothing was fuzzed", file=sys.stderr)
        rc = 1
    print("\nverify:", "OK" if rc == 0 else "FAILED")
    return rc


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specbound", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("prove", help="prove every theorem with Z3 (witness, unsat core, mutants)")
    p.add_argument("--only", action="append", metavar="ID", help="run only this theorem id (repeatable)")
    p.add_argument("--json", metavar="PATH", help="write the machine-readable report here")
    p.add_argument("--kernels", action="store_true",
                   help="also prove the Triton kernels (bounds, no wrap, no truncation, races) by symbolic execution")
    p.add_argument("--all", action="store_true",
                   help="with --kernels: every covered specialization, incl. the serving envelope's GPU launches "
                        "at typical configurations (default: a representative subset)")
    p.set_defaults(func=cmd_prove)

    v = sub.add_parser("verify", help="the main job: prove everything")
    v.add_argument("--json", metavar="PATH", help="write the proof report here")
    v.add_argument("--no-kernels", action="store_true",
                   help="skip the kernel theorems (symbolic execution of the Triton kernels, about a minute)")
    v.set_defaults(func=cmd_verify)

    d = sub.add_parser("docs", help="write docs/invariants.md from the spec and the proofs")
    d.add_argument("--check", action="store_true", help="fail if the committed file is stale")
    d.add_argument("--output", default="docs/invariants.md", help=argparse.SUPPRESS)
    d.add_argument("--timings", metavar="PATH",
                   help="a saved `specbound prove --kernels --all --json` report: the seconds of "
                        "docs/kernel-proofs.md's per-specialization table (default: keep those in the file)")
    d.set_defaults(func=cmd_docs)

    m = sub.add_parser("manifest", help="check proofs/manifest.json (expected theorem ids, verdicts, mutants) "
                                        "against the registries, or write it from a full run")
    m.add_argument("--report", metavar="PATH",
                   help="a saved full `specbound prove --kernels --all --json` report: check it too "
                        "(every entry and the totals), or, with --write, write the manifest from it")
    m.add_argument("--write", action="store_true",
                   help="regenerate the manifest from --report (also replays the spec mutants, about 30 s)")
    m.set_defaults(func=cmd_manifest)

    for name in FEATURE_MODULES:
        module = _feature(name)
        if module is not None:
            module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except SpecArgumentError as exc:
        print(f"specbound: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
