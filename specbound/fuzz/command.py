"""``specbound fuzz``: run the differential properties, the mutant replays and the CUDA-graph
state machine; ``verify_step`` is the default budget ``specbound verify`` runs after the proofs.

    specbound fuzz [--target reference|triton|all] [--examples N | --minutes M] [--scale X]
                   [--seed S] [--profile ci|dev|deep] [--database DIR] [--json PATH]
                   [--property NAME ...] [--replay CASE]

``--examples N``: N examples per property (default: the profile's budget per cost class,
times ``--scale``).  ``--minutes M``: repeat rounds over the properties (a new seed each
round) until M minutes are spent.  ``--seed S``: Hypothesis' own seed for every part
(properties, state machine; round ``r`` of a timed run uses ``S + r``), and no example
database: two runs with the same seed check the same cases and print the same report
(timings aside; the ``cases`` column is a digest of every case checked).  Without it the
``ci`` profile is derandomized (the same cases on every run of the same code) and
``dev``/``deep`` draw fresh cases and replay the failures in their example database
(``.hypothesis/examples`` of the checkout, or ``--database DIR``; see
:mod:`specbound.fuzz.profiles`).  On a failure the minimal case is printed with a
one-line replay command (``specbound fuzz --property NAME --replay '<case json>'``).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

from specbound.cli_common import add_output_option, positive_int, verdict
from specbound.spec import SpecArgumentError

STATEFUL = "stateful.cuda_graph"
REPLAYS = "replay.mutants"
EXTRAS = {REPLAYS: "[triton    fixed ] every sizing-mutant counterexample as a launch",
          STATEFUL: "[triton    state ] capture at 8, run up to 48 (CUDA-graph scenario)"}
VERIFY_SCALE = 5.0


def positive_float(name, what="a number of minutes"):
    """An argparse type: a float > 0, refused naming ``name``."""
    def parse(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be {what}, got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{name} must be > 0, got {value}")
        return value
    return parse


def register(subparsers) -> None:
    p = subparsers.add_parser("fuzz", help="differential fuzzing: spec vs reference vs Triton kernels",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", choices=("reference", "triton", "all"), default=None,
                   help="which implementation(s) to exercise (default: all)")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--examples", type=positive_int("--examples"), metavar="N",
                        help="examples per property (default: the profile's budget)")
    budget.add_argument("--minutes", type=positive_float("--minutes"), metavar="M",
                        help="keep fuzzing for M minutes (rounds with fresh seeds)")
    p.add_argument("--scale", type=positive_float("--scale", "a number"), default=None, metavar="X",
                   help="multiply the profile's budgets by X (not with --examples)")
    p.add_argument("--seed", type=int, default=None, metavar="S",
                   help="Hypothesis seed of every part of the run (reproducible; no example database)")
    p.add_argument("--profile", choices=("ci", "dev", "deep"), default=None,
                   help="Hypothesis profile (default: ci when CI is set, else dev)")
    p.add_argument("--database", metavar="DIR", default=None,
                   help="example database of the dev/deep profiles (default: .hypothesis/examples)")
    add_output_option(p)
    p.add_argument("--property", action="append", metavar="NAME",
                   help="run only this check (repeatable; not with --target); see --list")
    p.add_argument("--replay", metavar="CASE", help="check one case (JSON text, or @file) and exit")
    p.add_argument("--list", action="store_true", help="list the checks --property accepts and exit")
    p.set_defaults(func=run)


# --- running ----------------------------------------------------------------------------------

def _replay_command(name: str, case) -> str:
    return f"specbound fuzz --property {name} --replay {shlex.quote(case.to_json())}"


def _bar(done: int, total: int, width: int = 20) -> str:
    filled = int(width * done / max(total, 1))
    return "[" + "#" * filled + "." * (width - filled) + f"] {done}/{total}"


def crashed(name: str, exc: BaseException, seconds: float = 0.0):
    """A check that could not even run (its strategy, its replays ...) is a failure too."""
    from .runner import RunResult, describe
    res = RunResult(name, failures=1, seconds=seconds)
    res.message = f"could not run: {describe(exc)}"
    return res


def _run_stateful(examples: int, seed: int | None, derandomize: bool):
    """The state machine, seeded like the properties: Hypothesis' ``@seed`` (no database)
    when ``seed`` is given, else derandomized or fresh as the profile says."""
    from hypothesis import HealthCheck, settings
    from hypothesis import seed as fixed_seed
    from hypothesis.stateful import run_state_machine_as_test

    from . import stateful
    from .runner import RunResult, no_local_constants
    res = RunResult(STATEFUL)
    traces = []

    class Counted(stateful.CudaGraphMachine):
        def __init__(self):
            super().__init__()
            traces.append(self.trace)
    opts = dict(max_examples=examples, stateful_step_count=8, deadline=None, derandomize=derandomize,
                suppress_health_check=list(HealthCheck))
    machine = Counted
    if seed is not None and not derandomize:
        machine, opts["database"] = fixed_seed(seed)(Counted), None
    start = time.perf_counter()
    try:
        with no_local_constants():
            run_state_machine_as_test(machine, settings=settings(**opts))
    except Exception as exc:   # any exception is the machine's failure: the run goes on
        from .runner import describe
        res.failures = 1
        res.message = describe(exc)
        res.case = Counted.last_trace
    res.examples = len(traces)
    for trace in traces:
        res.saw(json.dumps(trace, default=str))
    res.seconds = time.perf_counter() - start
    return res


def _run_replays(spec_counterexamples=None):
    from . import replay
    from .runner import RunResult
    start = time.perf_counter()
    res = RunResult(REPLAYS)
    rows = replay.replay_all(given=spec_counterexamples)
    res.examples = len(rows)
    for r in rows:
        res.saw(r.line())
    bad = [r for r in rows if not r.ok]
    res.failures = len(bad)
    res.message = "; ".join(r.line() for r in bad)
    res.seconds = time.perf_counter() - start
    res.replays = rows  # type: ignore[attr-defined]
    return res


def _table(results) -> str:
    head = (f"{'property':28s} {'examples':>9s} {'failures':>9s} {'seconds':>8s} {'cases/min':>10s} "
            f"{'cases':>16s}")
    lines = [head, "-" * len(head)]
    for r in results:
        lines.append(f"{r.name:28s} {r.examples:9d} {r.failures:9d} {r.seconds:8.1f} {r.per_minute:10.0f} "
                     f"{r.cases_digest:>16s}")
    return "\n".join(lines)


def fuzz(*, target="all", examples=None, minutes=None, seed=None, profile=None, only=None,
         json_path=None, include_extras=True, scale: float = 1.0, database=None, out=None,
         spec_counterexamples=None) -> int:
    out = out or sys.stdout   # looked up per call: whatever stdout is now (a capture, a redirect)
    from . import profiles
    from .runner import RunResult

    name = profiles.load_profile(profile, database=database)
    derandomize = name == "ci" and seed is None
    props, extras = select_checks(only, target)
    if not include_extras and not only:
        extras = []
    results = {p.name: RunResult(p.name) for p in props}
    results.update({x: RunResult(x) for x in extras})
    deadline = time.perf_counter() + 60 * minutes if minutes else None
    round_no = 0
    total = len(props) + len(extras)
    print(header(name, target, examples=examples, minutes=minutes, seed=seed), file=out)
    while True:
        for i, p in enumerate(props):
            if deadline and time.perf_counter() > deadline and round_no:
                break
            if results[p.name].failures:       # already failed: keep the first minimal case
                continue
            results[p.name] = run_check(p.name, name, examples=examples, scale=scale, seed=seed,
                                        derandomize=derandomize, round_no=round_no, result=results[p.name])
            print(progress(i + 1, total, round_no, results[p.name]), file=out, flush=True)
        if round_no == 0:
            for j, x in enumerate(extras):
                results[x] = run_check(x, name, examples=examples, scale=scale, seed=seed, derandomize=derandomize,
                                       spec_counterexamples=spec_counterexamples)
                print(progress(len(props) + j + 1, total, round_no, results[x]), file=out, flush=True)
        round_no += 1
        if not deadline or time.perf_counter() > deadline:
            break
        derandomize = False
    return finish(list(results.values()), profile=name, target=target, seed=seed, scale=scale, rounds=round_no,
                  json_path=json_path, out=out)


def header(profile: str, target: str, *, examples=None, minutes=None, seed=None) -> str:
    return (f"specbound fuzz: profile {profile}, target {target}, "
            f"{f'{minutes} min' if minutes else f'{examples} examples/property' if examples else 'profile budget'}"
            f"{'' if seed is None else f', seed {seed}'}")


def run_check(check: str, profile: str, *, examples=None, scale: float = 1.0, seed=None, derandomize=False,
              round_no: int = 0, result=None, spec_counterexamples=None):
    """One check (a property, the mutant replays or the state machine) at ``examples`` or
    the ``profile``'s budget times ``scale``; a property's round ``round_no`` goes on in
    ``result``; the mutant replays replay ``spec_counterexamples`` when given (see
    :func:`spec_counterexamples`), else prove the spec theorems for theirs.  A check that cannot even run (its strategy, its replays ...) is a failed
    result, never an exception.  (The extras run once, in round 0.)"""
    from . import profiles, properties
    from .runner import RunResult, run_property

    start = time.perf_counter()
    try:
        if check == REPLAYS:
            return _run_replays(spec_counterexamples)
        if check == STATEFUL:
            return _run_stateful(examples or profiles.budget("stateful", profile, scale=scale), seed, derandomize)
        p = properties.property_named(check)
        res = result or RunResult(check)
        run_property(p.name, p.check, p.strategy(), max_examples=examples or profiles.budget(p.cost, profile, scale=scale),
                     seed=None if derandomize or seed is None else seed + round_no, derandomize=derandomize,
                     result=res, examples=p.examples() if round_no == 0 else ())
        return res
    except Exception as exc:
        return crashed(check, exc, time.perf_counter() - start)


def progress(done: int, total: int, round_no: int, r) -> str:
    """The line printed when check ``r`` finished (a check that failed is not run again)."""
    return (f"{_bar(done, total)} round {round_no + 1} {r.name:28s} {r.examples:6d} ex "
            f"{r.seconds:7.1f} s {'ok' if not r.failures else 'FAILED'}")


def finish(ordered: list, *, profile: str, target: str, seed, scale: float, rounds: int, json_path=None,
           out=None) -> int:
    """The table, every failure's minimal case and replay command, the JSON report and the
    verdict line of finished checks; the exit status."""
    out = out or sys.stdout
    print("\n" + _table(ordered), file=out)
    failed = [r for r in ordered if r.failures]
    for r in failed:
        print(f"\nFAILED {r.name}: {r.message[:2000]}", file=out)
        if r.case is not None and hasattr(r.case, "to_json"):
            print(f"  minimal case: {r.case.to_json()}", file=out)
            print(f"  replay: {_replay_command(r.name, r.case)}", file=out)
        elif r.case is not None:
            print(f"  minimal steps: {r.case}", file=out)
    if json_path:
        payload = {
            "profile": profile, "target": target, "seed": seed, "scale": scale, "rounds": rounds,
            "ok": not failed,
            "properties": [{
                "name": r.name, "examples": r.examples, "failures": r.failures,
                "seconds": round(r.seconds, 3), "cases_per_minute": round(r.per_minute, 1),
                "cases_digest": r.cases_digest,
                "message": r.message or None,
                "case": json.loads(r.case.to_json()) if hasattr(r.case, "to_json") else r.case,
                "replay_command": _replay_command(r.name, r.case) if hasattr(r.case, "to_json") else None,
            } for r in ordered],
        }
        rep = next((r for r in ordered if r.name == REPLAYS), None)
        if rep is not None and hasattr(rep, "replays"):
            payload["mutant_replays"] = [
                {"theorem": x.theorem, "mutant": x.mutant, "status": x.status, "counterexample": x.counterexample,
                 "batch": x.batch, "mutant_sizing": x.mutant_sizing, "mutant_outcome": x.mutant_outcome,
                 "spec_sizing": x.spec_sizing, "spec_outcome": x.spec_outcome, "note": x.note}
                for x in rep.replays]
        Path(json_path).write_text(json.dumps(payload, indent=2, default=str) + "\n")
        print(f"\nwrote {json_path}", file=out)
    examples_run = sum(r.examples for r in ordered)
    verdict("fuzz", not failed, (f"{len(failed)} of {len(ordered)} checks failed: {', '.join(r.name for r in failed)}"
                                 if failed else f"{len(ordered)} checks") + f", {examples_run} examples", out=out)
    return 1 if failed else 0


def select_checks(only, target) -> tuple[list, list[str]]:
    """The properties and the extra checks (mutant replays, state machine) to run: the ones
    ``only`` names, each one ``--list`` shows, or else those of ``target``."""
    from . import properties
    if not only:
        return properties.select(target), [REPLAYS, STATEFUL] if target in ("triton", "all") else []
    known = [p.name for p in properties.PROPERTIES] + list(EXTRAS)
    for name in only:
        if name not in known:
            raise SpecArgumentError("--property", f"unknown check {name!r}; `specbound fuzz --list` lists: "
                                                  f"{', '.join(known)}")
    return [properties.property_named(n) for n in only if n not in EXTRAS], [n for n in only if n in EXTRAS]


def replay_case(names, text: str, out=None) -> int:
    out = out or sys.stdout
    from . import properties
    from .records import case_from_json
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text()
        except OSError as exc:
            raise SpecArgumentError("--replay", f"cannot read the case file {text[1:]}: "
                                                f"{exc.strerror or exc}") from None
    try:
        case = case_from_json(text)
    except (json.JSONDecodeError, TypeError) as exc:
        raise SpecArgumentError("--replay", f"not a valid case: {exc}") from None
    if not names:
        raise SpecArgumentError("--property", "required with --replay (which property to check)")
    from .runner import describe
    rc = 0
    for name in names:
        if name in EXTRAS:
            raise SpecArgumentError("--property", f"{name} checks no single case; --replay needs a property")
        prop = properties.property_named(name)
        try:
            prop.check(case)
            print(f"{name}: holds on this case", file=out)
        except Exception as exc:   # whatever it raises, it is this property's failure
            print(f"{name}: FAILED: {describe(exc)}", file=out)
            rc = 1
    verdict("fuzz", rc == 0, f"replayed one case on {len(names)} propert{'y' if len(names) == 1 else 'ies'}", out=out)
    return rc


def _refuse_no_ops(args) -> None:
    """An option that would change nothing in this combination is a bad command line."""
    given = {flag: value for flag, value in (
        ("--target", args.target), ("--examples", args.examples), ("--minutes", args.minutes),
        ("--scale", args.scale), ("--seed", args.seed), ("--profile", args.profile),
        ("--database", args.database), ("--json", args.json), ("--property", args.property),
        ("--replay", args.replay)) if value is not None}
    if args.list and given:
        raise SpecArgumentError("--list", f"lists the checks and runs nothing: {', '.join(given)} would do nothing")
    if args.replay is not None:
        extra = [f for f in given if f not in ("--property", "--replay")]
        if extra:
            raise SpecArgumentError("--replay", f"checks one case once: {', '.join(extra)} would do nothing")
    if args.property and args.target is not None:
        raise SpecArgumentError("--target", "--property names the checks to run; give one of them")
    if args.examples and args.scale is not None:
        raise SpecArgumentError("--scale", "scales the profile's budgets; --examples sets the count itself: "
                                           "give one of them")
    if args.database is not None and args.seed is not None:
        raise SpecArgumentError("--database", "--seed runs without an example database; give one of them")
    if args.database is not None and args.profile == "ci":
        raise SpecArgumentError("--database", "the ci profile uses no example database (only dev and deep do)")


def run(args) -> int:
    _refuse_no_ops(args)
    if args.list:
        from . import properties
        for p in properties.PROPERTIES:
            print(f"{p.name:28s} [{p.target:9s} {p.cost:6s}] {p.doc}")
        for name, doc in EXTRAS.items():
            print(f"{name:28s} {doc}")
        return 0
    if args.replay:
        return replay_case(args.property, args.replay)
    target = args.target or "all"
    select_checks(args.property, target)   # an unknown name is refused before anything runs
    return fuzz(target=target, examples=args.examples, minutes=args.minutes, seed=args.seed,
                profile=args.profile, only=args.property, json_path=args.json,
                scale=1.0 if args.scale is None else args.scale, database=args.database)


def verify_step(args, spec_results=None) -> int:
    """The default fuzz budget of ``specbound verify``: the ci profile (deterministic) at 5x its
    test budget, every property, the mutant replays (of ``spec_results``' counterexamples: the
    proofs' spec theorems, when given) and the state machine (one core; a parallel verify runs
    the same checks through :func:`verify_check`)."""
    return fuzz(target="all", profile="ci", scale=VERIFY_SCALE, json_path=getattr(args, "fuzz_json", None),
                spec_counterexamples=None if spec_results is None else spec_counterexamples(spec_results))


def verify_plan() -> tuple[str, list[str], dict[str, str]]:
    """The profile of verify's fuzz phase (loaded), its checks in report order, and each
    property's cost class."""
    from . import profiles
    profile = profiles.load_profile("ci")
    props, extras = select_checks(None, "all")
    return profile, [p.name for p in props] + extras, {p.name: p.cost for p in props}


def verify_check(check: str, scale: float = VERIFY_SCALE, spec_counterexamples=None):
    """One check of verify's fuzz phase, as :func:`verify_step` runs it (a task of a parallel
    verify, in a worker process: the profile is loaded here); the mutant replays take
    ``spec_counterexamples`` (:func:`spec_counterexamples` of verify's proofs) when given,
    instead of proving the spec theorems again."""
    from . import profiles
    profile = profiles.load_profile("ci")
    return run_check(check, profile, scale=scale, derandomize=True, spec_counterexamples=spec_counterexamples)


def spec_counterexamples(results) -> list:
    """What the mutant replays need of the spec theorems' ``results`` (plain values, for a
    worker process's :func:`verify_check`)."""
    from . import replay
    return replay.sizing_counterexamples(results)
