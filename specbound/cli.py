"""specbound: model-checked buffer sizing for EAGLE speculative decoding.

Start with `specbound verify` (every proof and the default fuzz, side by side on the usable cores).
Each command ends with one verdict line, `<command>: OK|FAILED (...)`."""

# A feature module registers its subcommand with ``register(subparsers)``; the fuzz module also
# provides ``verify_step(args) -> int``, the fuzz budget that ``specbound verify`` runs.

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import sys
import time
from pathlib import Path

FEATURE_MODULES = ("specbound.fuzz.command", "specbound.audit.command")

from specbound import verify
from specbound.cli_common import add_output_option, check_outputs, check_writable, checkout, positive_int, verdict
from specbound.spec import SpecArgumentError

EXIT_STATUS = """exit status: 0 all checks passed; 1 a check failed (a theorem, a property, a stale file, a
difference from the manifest); 2 a bad command line (nothing was run); 3 (audit only) nothing
found, but not everything could be checked."""


def _write_json(path: str, payload: dict) -> None:
    Path(path).write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n")


def _unknown(option: str, tid: str, known) -> SpecArgumentError:
    """An unknown theorem id, refused naming the closest known ones (not all 400 of them)."""
    import difflib
    near = difflib.get_close_matches(tid, list(known), n=3, cutoff=0.6)
    return SpecArgumentError(option, f"unknown theorem id {tid}; " + (
        f"closest: {', '.join(near)}" if near else "no id is close (every id is in proofs/manifest.json)"))


def _known_ids() -> tuple[list[str], dict]:
    """Every spec theorem id, and every kernel theorem id of every covered specialization."""
    from specbound.proofs import registry
    from specbound.proofs.symexec.theorems import theorem_ids
    return registry.theorem_ids(), theorem_ids(full=True)


def select_theorems(args) -> tuple[list[str] | None, list[str] | None]:
    """``(spec ids, kernel ids)`` that ``prove`` runs (``None``: every one of the default run),
    after refusing a combination in which an option would do nothing."""
    kernels, only = getattr(args, "kernels", False), getattr(args, "only", None)
    if getattr(args, "all", False) and not kernels:
        raise SpecArgumentError("--all", "selects every kernel specialization; it does nothing without --kernels")
    if getattr(args, "all", False) and only:
        raise SpecArgumentError("--all", "--only already names the theorems to run; give one of them")
    if getattr(args, "explain", None):
        given = [flag for flag, on in (("--only", only), ("--json", args.json), ("--kernels", kernels)) if on]
        if given:
            raise SpecArgumentError(given[0], "does nothing with --explain, which proves nothing")
        spec_known, kernel_known = _known_ids()
        for tid in args.explain:
            if tid not in spec_known and tid not in kernel_known:
                raise _unknown("--explain", tid, [*spec_known, *kernel_known])
        return [], []
    if not only:
        return None, None
    spec_known, kernel_known = _known_ids()
    spec_ids, kernel_ids = [], []
    for tid in only:
        if tid in spec_known:
            spec_ids.append(tid)
        elif tid in kernel_known:
            if not kernels:
                raise SpecArgumentError("--only", f"{tid} is a kernel theorem: it runs only with --kernels")
            kernel_ids.append(tid)
        else:
            raise _unknown("--only", tid, [*spec_known, *kernel_known])
    if kernels and not kernel_ids:
        raise SpecArgumentError("--kernels", "the --only ids name no kernel theorem (KERNEL-...): "
                                             "it would do nothing")
    return spec_ids, kernel_ids


def cmd_prove(args) -> int:
    spec_ids, kernel_ids = select_theorems(args)
    if getattr(args, "explain", None):
        from specbound.explain import explain
        for tid in args.explain:
            print(explain(tid))
        verdict("prove", True, f"explained {len(args.explain)} theorem(s); nothing was proved")
        return 0
    from specbound.proofs import registry
    from specbound.report import prove_table

    results, seconds = [], 0.0
    if spec_ids is None or spec_ids:
        count = len(spec_ids) if spec_ids else len(registry.BUILDERS)
        print(f"proving {count} spec theorem(s) ...", flush=True)
        results, seconds = _prove_spec(spec_ids, getattr(args, "jobs", None) or verify.usable_cores())
        if spec_ids is None and getattr(args, "spec_results_to", None):
            args.spec_results_to(results)   # verify's mutant replays take their counterexamples
    crashed = ""
    if getattr(args, "kernels", False):
        # Kernel theorems: the symbolic executor reads the kernel sources by path;
        # torch/triton are imported only to replay mutants' counterexamples.
        from specbound.proofs.symexec import theorems as kernel_theorems

        start = time.perf_counter()
        spec_results = results
        which = (f"{len(kernel_ids)} kernel theorem(s) (their specializations" if kernel_ids else
                 f"the kernel theorems ({'all covered' if args.all else 'default'} specializations")
        print(f"proving {which}; a line each on stderr) ...", flush=True)

        def progress(done, total, kind, sp, new, so_far, spec_seconds):
            # One line per specialization on stderr, and the JSON so far (marked partial), so
            # a long --all run shows where it is and leaves its results if it is cut short.
            name = kernel_theorems.kernel_name(new[0].id) if new else kind
            print(f"[{done}/{total}] {name}[{sp.label}]: {sum(r.ok for r in new)}/{len(new)}, {spec_seconds:.0f} s",
                  file=sys.stderr, flush=True)
            if args.json:
                partial = registry.to_json(spec_results + so_far, seconds + time.perf_counter() - start)
                _write_json(args.json, {**partial, "partial": f"{done}/{total} specializations"})
        try:
            results = results + kernel_theorems.run_all(full=args.all, progress=progress, only=kernel_ids or None,
                                                        proved=getattr(args, "kernels_proved", None))
        except Exception as exc:   # e.g. a lemma refuted deep inside: still report every other theorem
            crashed = f"{type(exc).__name__}: {exc}"
        seconds += time.perf_counter() - start
    payload = registry.to_json(results, seconds)
    print(prove_table(results))
    s = payload["summary"]
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
        print(f"wrote {args.json}")
    off_manifest = _manifest_problems(args, results, payload, crashed)
    for line in off_manifest:
        print(f"FAILED manifest: {line}", file=sys.stderr)
    ok = s["failed"] == 0 and not crashed and not off_manifest
    verdict("prove", ok, f"{s['proved']}/{len(results)} proved, {s['mutants_refuted']} mutants refuted, "
                         f"{s['mutants_survived']} survived, {len(off_manifest)} off the manifest"
                         f"{', kernel theorems stopped' if crashed else ''}, {s['seconds']:.2f} s, "
                         f"z3 {payload['z3_version']}")
    return 0 if ok else 1


def _prove_spec(spec_ids, jobs: int):
    """The spec theorems (all, or ``spec_ids``) and the seconds they took, on up to ``jobs``
    worker processes (:func:`verify.worker_pool`), each theorem one task; the results come back in
    the order asked and equal one process's, because a theorem's result rests on its own
    queries alone, each in a fresh Z3 context."""
    from specbound.proofs import registry

    ids = spec_ids or registry.theorem_ids()
    if jobs <= 1 or len(ids) <= 1:
        return registry.run_all(spec_ids)
    start = time.perf_counter()
    # Forked while this process has no other thread (none before its first solver check), the
    # workers start with every module imported: no fork server, no import per worker.
    with verify.worker_pool(min(jobs, len(ids)), "fork" if _threads() == 1 else None) as pool:
        results = list(pool.map(registry.run_one, ids))
    return results, time.perf_counter() - start


def _threads() -> int:
    """This process's threads as the kernel counts them (execnet's and Z3's timer threads too,
    which ``threading`` does not see); 2 where it cannot say."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 2


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

    if args.check and args.timings:
        raise SpecArgumentError("--timings", "only feeds the regenerated tables; --check compares and writes nothing")
    root = checkout("docs")
    report = _read_json("--timings", args.timings) if args.timings else None   # before writing anything
    target = Path(args.output) if args.output else root / "docs" / "invariants.md"
    if not args.check:   # every file it writes, before the render (about 15 s)
        check_writable("--output" if args.output else "docs", target)
        for rel in manifest_docs.FILES:
            check_writable("docs", root / rel)
    text = docs.render()
    if args.check:
        stale = [] if target.is_file() and target.read_text() == text else \
            [f"{target}: differs from what the spec and the proofs give"]
        stale += manifest_docs.stale(root=root)
        for line in stale:
            print(f"stale (run `specbound docs` and commit the result): {line}", file=sys.stderr)
        verdict("docs", not stale, f"{len(stale)} stale" if stale else
                f"{target.relative_to(root) if target.is_relative_to(root) else target} and the parts "
                "generated from proofs/manifest.json are up to date")
        return 1 if stale else 0
    target.write_text(text)
    print(f"wrote {target}")
    written = manifest_docs.write(report=report, root=root)
    for rel in written:
        print(f"wrote {rel} (from proofs/manifest.json)")
    verdict("docs", True, f"wrote {target.name}, {len(written)} other file(s) changed, in {root}")
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
        payload = _read_json("--report", args.report)
        check_writable("--write", manifest.PATH)   # before the replays (about 30 s)
        from specbound.fuzz.replay import replay_all

        previous = manifest.load() if manifest.PATH.exists() else None
        fresh, problems = manifest.write(payload, replay_all(), previous)
        for line in problems:
            print(f"FAILED: {line}", file=sys.stderr)
        if problems:
            verdict("manifest", False, f"{len(problems)} problem(s) in {args.report}; {manifest.PATH} not written")
            return 1
        for line in (manifest.compare_results(payload["theorems"], previous) if previous else []):
            print(f"changed: {line}")
        manifest.dump(fresh)
        print(f"wrote {manifest.PATH}: {json.dumps(fresh['totals'])}\n"
              f"regenerate the docs with `specbound docs --timings {args.report}`")
        verdict("manifest", True, f"wrote {manifest.PATH}")
        return 0
    report = _read_json("--report", args.report) if args.report else None
    try:
        expected = manifest.load()
    except (OSError, ValueError) as exc:
        print(f"FAILED: cannot read {manifest.PATH}: {exc}", file=sys.stderr)
        verdict("manifest", False, f"cannot read {manifest.PATH}")
        return 1
    problems = manifest.check_registries(expected)
    if report is not None:
        problems += manifest.check_report(report, expected)
    for line in problems:
        print(f"FAILED: {line}", file=sys.stderr)
    if problems:
        print(f"fix the registry, or regenerate the manifest from a full run (`specbound manifest --write "
              "--report PATH`) and commit it", file=sys.stderr)
        verdict("manifest", False, f"{len(problems)} difference(s) from {manifest.PATH}")
        return 1
    verdict("manifest", True, f"{manifest.PATH} agrees with the registries"
                              + (f" and with {args.report}" if args.report else ""))
    return 0


def _feature(name: str):
    """A feature module, or None when it is not part of this installation."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            return None
        raise


def prove_step(no_kernels: bool, json_path, kernels_proved=None, spec_results_to=None) -> int:
    """Verify's proofs: every spec theorem and the kernel theorems of the default specializations
    (``kernels_proved``: their results, proved by a parallel verify's worker; see
    ``kernel_theorems.run_all``); ``spec_results_to(results)`` is given the spec theorems'
    results once proved.  A crash inside a proof is a failed verify (exit 1), never a usage
    error (exit 2)."""
    try:
        return cmd_prove(argparse.Namespace(only=None, json=json_path, kernels=not no_kernels, all=False, explain=None,
                                            kernels_proved=kernels_proved, spec_results_to=spec_results_to,
                                            jobs=1))  # verify's pool is busy with the fuzz checks meanwhile
    except Exception as exc:
        print(f"FAILED prove: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def cmd_verify(args) -> int:
    """The main job: every theorem proved (the spec's, and the kernels' on the default subset of
    specializations), then the default fuzz budget; a missing fuzz is a failure, not a skip.
    With more than one job the two phases and the fuzz checks run side by side
    (:mod:`specbound.verify`)."""
    jobs = args.jobs or verify.usable_cores()
    fuzz = _feature("specbound.fuzz.command")
    has_fuzz = fuzz is not None and hasattr(fuzz, "verify_step")
    if jobs > 1 and has_fuzz:
        from specbound.proofs.symexec import theorems as kernel_theorems
        return verify.run_parallel(jobs=jobs, no_kernels=args.no_kernels, fuzz=fuzz, scale=fuzz.VERIFY_SCALE,
                                   prove=functools.partial(prove_step, args.no_kernels, args.json),
                                   kernel_steps=kernel_theorems.proved_steps)
    print(verify.proofs_line(args.no_kernels), flush=True)
    spec_results: list = []   # the mutant replays take the counterexamples the proofs found
    rc_prove = prove_step(args.no_kernels, args.json, spec_results_to=spec_results.append)
    print("\n" + verify.FUZZ, flush=True)
    if has_fuzz:
        rc_fuzz = fuzz.verify_step(args, spec_results=spec_results[0] if spec_results else None)
    else:   # an installation without the fuzz has not verified what verify promises
        print("FAILED fuzz: specbound.fuzz is not part of this installation; nothing was fuzzed", file=sys.stderr)
        rc_fuzz = 1
    return verify.finish(rc_prove, rc_fuzz)


def _version() -> str:
    from importlib import metadata
    try:
        return f"specbound {metadata.version('specbound')}"
    except metadata.PackageNotFoundError:
        return "specbound (not installed: no package metadata; run `pip install -e .` in the checkout)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specbound", description=__doc__, epilog=EXIT_STATUS,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("prove", help="prove every theorem with Z3 (witness, unsat core, mutants)", epilog=EXIT_STATUS)
    p.add_argument("--only", action="append", metavar="ID",
                   help="run only this theorem id (repeatable): a spec theorem, or a kernel theorem "
                        "(KERNEL-..., with --kernels)")
    add_output_option(p)
    p.add_argument("--kernels", action="store_true",
                   help="also prove the Triton kernels (bounds, no wrap, no truncation, races) by symbolic execution")
    p.add_argument("--all", action="store_true",
                   help="with --kernels: every covered specialization, incl. every GPU launch of the serving "
                        "envelope (default: a representative subset)")
    p.add_argument("--jobs", type=positive_int("--jobs"), default=None, metavar="N",
                   help="worker processes for the spec theorems, one theorem a task, the report the same as "
                        "one process's (default: the usable cores; 1: one process)")
    p.add_argument("--explain", action="append", metavar="ID",
                   help="say what theorem ID claims, in words, and what it rests on (repeatable); proves nothing")
    p.set_defaults(func=cmd_prove)

    v = sub.add_parser("verify", help="the main job: prove everything, then fuzz", epilog=EXIT_STATUS)
    add_output_option(v, help="write the proof report here")
    v.add_argument("--no-kernels", action="store_true",
                   help="skip the kernel theorems (symbolic execution of the Triton kernels, about a minute)")
    v.add_argument("--jobs", type=positive_int("--jobs"), default=None, metavar="N",
                   help="worker processes: the proofs and the fuzz checks run side by side, the output "
                        "in the one-job order (default: the usable cores; 1: one process, in order)")
    v.set_defaults(func=cmd_verify)

    d = sub.add_parser("docs", help="write docs/invariants.md (and the generated parts of the other docs) "
                                    "in the checkout specbound is installed from", epilog=EXIT_STATUS)
    d.add_argument("--check", action="store_true", help="fail if a committed file is stale")
    d.add_argument("--output", default=None, help=argparse.SUPPRESS)
    d.add_argument("--timings", metavar="PATH",
                   help="a saved `specbound prove --kernels --all --json` report: the seconds of "
                        "docs/kernel-proofs.md's per-specialization table (default: keep those in the file)")
    d.set_defaults(func=cmd_docs)

    m = sub.add_parser("manifest", help="check proofs/manifest.json (expected theorem ids, verdicts, mutants) "
                                        "against the registries, or write it from a full run", epilog=EXIT_STATUS)
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
        check_outputs(args)   # a path that cannot be written is a bad command line: say so before any work
        return args.func(args)
    except SpecArgumentError as exc:
        print(f"specbound: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
