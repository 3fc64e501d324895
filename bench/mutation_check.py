"""Mutation check of specbound itself: plant each registered bug in a copy, see what turns red.

For every mutant of :data:`MUTANTS` (a text edit of one product file: the bugs a reviewer
planted when this check was written, sglang's historical bugs put back at the source, and
one per shared size/dtype convention), in a temporary copy of the working tree:

1. the unit tests (``python -m pytest -x``, the default run, ``CI=1`` so Hypothesis is
   deterministic): red or green, and the first failing test;
2. ``specbound verify`` (its default budget; ``--no-kernels`` with ``--fast``): red or
   green, and every failing theorem / property it names.

A first row (``control``) runs the unmutated copy: both must be green, or the harness
itself is broken.  A mutant whose text no longer occurs exactly once in its file is a
failure of the check ("cannot plant"), never skipped.  The copy imports itself: its
``specbound/`` folder gets links to its ``spec/``, ``proofs/``, ``reference/`` and
``kernels/`` (the install's package-dir mapping) and comes first on ``PYTHONPATH``, so
the editable install of the checkout is never used.

    python bench/mutation_check.py [--only ID ...] [--list] [--no-tests] [--no-verify] [--fast]
                                   [--pytest-args "..."] [--markdown PATH] [--json PATH]

Exits 1 when a mutant the unit tests catch survives ``specbound verify``, when a mutant
cannot be planted, or when the control is not green.  Expect about 5 to 10 minutes per
mutant on 2 cores (``docs/mutation-check.md`` has the last table).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _namespaced() -> tuple:
    """The root folders installed under the specbound namespace, read from pyproject's
    ``package-dir`` (a second list here went stale when ``replay/`` was added)."""
    import tomllib

    with open(ROOT / "pyproject.toml", "rb") as f:
        mapping = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
    return tuple(folder for package, folder in mapping.items() if package == f"specbound.{folder}")


NAMESPACED = _namespaced()


@dataclass(frozen=True)
class Mutant:
    id: str
    path: str                      # file, relative to the repository root
    edits: tuple                   # ((old text, new text), ...): each old text occurs exactly once
    models: str                    # what the bug is (and where it comes from)


# Each mutant is one bug; "why" is the list of bugs the suite missed or caught late.
MUTANTS = (
    Mutant("R2T-SPAN-PAGE-1", "reference/validation.py",
           (("spec.req_to_token_row_ok(r2t_width, s, k, steps, page, b)",
             "spec.req_to_token_row_ok(r2t_width, s, k, steps, 1, b)"),),
           "why: req_to_token row width checked as if page_size were 1 (paged narrow rows accepted)"),
    Mutant("NO-OUTPUT-SIZE-CHECK", "reference/validation.py",
           (("_refuse_unless(spec.output_holds_ok(value.numel(), min_numel, name),", "_refuse_unless((),"),),
           "why: the output-size check dropped from validation"),
    Mutant("BITPACK-16-FOR-SMALL-N", "spec/verify_mask.py",
           (("return ite(n <= 8, 8, ite(n <= 16, 16, 32))", "return ite(n <= 8, 16, ite(n <= 16, 16, 32))"),),
           "why: 16-bit BITPACKING items for n <= 8 (a choice every implementation shares)"),
    Mutant("TRIVIAL-REUSE-NO-SIZE-GUARD", "reference/verify_mask.py",
           (("self.buffer.dtype == torch.bool and numel <= self.buffer.numel():",
             "self.buffer.dtype == torch.bool:"),),
           "why: the trivial-verify mask reuses the preallocated buffer without its size guard"),
    Mutant("KERNEL-SEARCH-PAST-N-1", "kernels/tree_build.py",
           (("ent_ok2 = req2 & (node2 < sel_width)", "ent_ok2 = req2 & (node2 < n)"),
            ("& (j3 < sel_width)", "& (j3 < n)")),
           "why: the kernel's parent search scans n entries, not n - 1 (sglang's CUDA kernel)"),
    Mutant("KERNEL-SEARCH-MATCH-PAST-N-1", "kernels/tree_build.py",
           (("& (j3 < sel_width)", "& (j3 < n)"),),
           "the parent search compares one entry past n - 1 (a masked-off -1 can match)"),
    Mutant("33127-FULL-ALWAYS-FITS", "reference/verify_mask.py",
           (("        return spec.fits(bs, self.max_bs)\n",
             "        return self.mode is TreeMaskMode.FULL_MASK or spec.fits(bs, self.max_bs)\n"),),
           "sglang #33119/#33127: VerifyMask.fits skipped the capacity check for FULL_MASK"),
    Mutant("29450-MISSING-DRAFT-TERM", "spec/verify_mask.py",
           (("    if mode is TreeMaskMode.FULL_MASK:\n        return n * (s + n)",
             "    if mode is TreeMaskMode.FULL_MASK:\n        return n * s"),),
           "sglang #29450: the FULL_MASK per-request size without the +n draft columns"),
    Mutant("27338-MISSING-TOPK", "spec/draft_kv.py",
           (("    return s * k * c\n", "    return s * c\n"),),
           "sglang #27338: the CUDA-graph kv_indices row without the factor topk"),
    Mutant("CHECK-STEPS-MINUS-ONE", "spec/draft_kv.py",
           (('    return check_int("num_steps", num_steps, minimum=1)\n',
             '    return check_int("num_steps", num_steps, minimum=1) - 1\n'),),
           "the kv capacity check counts num_steps - 1 steps (misses the last row)"),
    Mutant("KERNEL-WALK-PAST-DEPTH", "kernels/tree_build.py",
           (("for _step in tl.static_range(DEPTH):", "for _step in tl.static_range(DEPTH + 1):"),),
           "the kernel's root-ward walk takes one step more than D (sglang's CUDA walk is unbounded)"),
    Mutant("KERNEL-KV-ROW-STRIDE", "kernels/draft_kv.py",
           (("seg = (it2 - 1) * width + start", "seg = (it2 - 1) * (width - 1) + start"),),
           "the draft kv kernel's rows one slot too close (a row-stride bug)"),
    Mutant("KV-INDPTR-NO-ENTRY-0", "spec/draft_kv.py",
           (("    return draft_branches(num_seqs, topk) + 1\n", "    return draft_branches(num_seqs, topk)\n"),),
           "convention: kv_indptr rows without room for entry 0"),
    Mutant("TOKEN-NUMEL-SHORT", "spec/tree.py",
           (("return token_cell(check_int(\"bs\", bs, minimum=0), 0, num_draft_tokens)",
             "return token_cell(check_int(\"bs\", bs, minimum=0), 0, num_draft_tokens) - 1"),),
           "convention: positions / retrive_* sized one cell short"),
    Mutant("KV-COPY-TRUNCATES", "spec/draft_kv.py",
           (('return check_int("kv_bits", kv_bits, minimum=1) >= check_int("r2t_bits", r2t_bits, minimum=1)',
             'return check_int("kv_bits", kv_bits, minimum=1) >= 32'),),
           "convention: int32 kv_indices accepted for int64 req_to_token (slot numbers truncated)"),
    Mutant("REPLAY-OOB-READ-AS-CLEAN", "replay/checked.py",
           (('            return Replay("oob", oob_text(exc), inputs, kernel)\n', "            return None\n"),),
           "the replay layer reads an out-of-bounds access as a clean launch (every refutation by replay "
           "rests on this classification)"),
)


@dataclass
class Outcome:
    id: str
    models: str
    planted: bool = True
    note: str = ""
    tests: str = "not run"          # "red" | "green" | "error" | "not run"
    tests_first_failure: str = ""
    tests_seconds: float = 0.0
    verify: str = "not run"
    verify_failures: list = field(default_factory=list)
    verify_seconds: float = 0.0


def plant(mutant: Mutant, root: Path) -> None:
    """Apply the mutant's edits to ``root``; raise ValueError when an edit does not apply."""
    path = root / mutant.path
    text = path.read_text()
    for old, new in mutant.edits:
        count = text.count(old)
        if count != 1:
            raise ValueError(f"{mutant.path}: expected the text {old!r} exactly once, found it {count} times")
        text = text.replace(old, new)
    path.write_text(text)


_BUILD_OUTPUTS = shutil.ignore_patterns(".git", ".venv", ".hypothesis", "__pycache__", "*.egg-info", "*.pyc")


def _not_sources(folder: str, names: list[str]) -> set[str]:
    """What a copy outside a git checkout leaves out: build outputs, and the links a copy
    made in its ``specbound/`` folder (they are made afresh)."""
    skip = set(_BUILD_OUTPUTS(folder, names))
    if Path(folder).resolve() == (ROOT / "specbound").resolve():
        skip |= {name for name in names if name in NAMESPACED}
    return skip


def snapshot(dest: Path) -> Path:
    """The working tree (tracked and untracked, not ignored) copied once into ``dest``, so
    every row of the table checks the same sources even if the checkout changes meanwhile.
    Outside a git checkout (e.g. inside such a copy): the tree minus build outputs."""
    listing = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                             capture_output=True)
    if listing.returncode or not (ROOT / ".git").exists():
        shutil.copytree(ROOT, dest, ignore=_not_sources)
        return dest
    for rel in filter(None, listing.stdout.decode().split("\0")):
        src = ROOT / rel
        if src.is_file():
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
    return dest


def copy_tree(dest: Path, source: Path | None = None) -> Path:
    """A copy of ``source`` (a :func:`snapshot`; default: a fresh one) in ``dest/repo``, with
    links ``repo/specbound/<name>`` -> ``repo/<name>`` for the namespaced root folders, so
    that ``repo`` on ``sys.path`` imports the whole ``specbound`` package from the copy."""
    repo = dest / "repo"
    if source is None:
        snapshot(repo)
    else:
        shutil.copytree(source, repo)
    for name in NAMESPACED:
        (repo / "specbound" / name).symlink_to(repo / name)
    return repo


def _env(repo: Path) -> dict:
    env = dict(os.environ)
    env.update(PYTHONPATH=str(repo), CI="1", PYTHONDONTWRITEBYTECODE="1")
    env.pop("HYPOTHESIS_PROFILE", None)
    return env


def _check_imports(repo: Path) -> None:
    packages = ["specbound.fuzz", *(f"specbound.{name}" for name in NAMESPACED)]
    out = subprocess.run([sys.executable, "-c", f"import importlib\nfor p in {packages!r}: "
                          "print(importlib.import_module(p).__file__)"],
                         cwd=repo, env=_env(repo), capture_output=True, text=True)
    paths = out.stdout.split()
    if out.returncode or len(paths) != len(packages) or not all(p.startswith(str(repo)) for p in paths):
        raise RuntimeError(f"the copy does not import its own specbound: {out.stdout} {out.stderr}")


def run_tests(repo: Path, pytest_args: list[str], res: Outcome, timeout: int) -> None:
    start = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", *pytest_args], cwd=repo,
                              env=_env(repo), capture_output=True, text=True, timeout=timeout)
        res.tests = {0: "green", 1: "red"}.get(proc.returncode, f"error (exit {proc.returncode})")
        failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", proc.stdout, re.M)
        res.tests_first_failure = failed[0] if failed else ""
        if res.tests.startswith("error"):
            res.note += (proc.stdout + proc.stderr)[-600:]
    except subprocess.TimeoutExpired:
        res.tests = f"error (timeout {timeout} s)"
    res.tests_seconds = time.perf_counter() - start


def run_verify(repo: Path, fast: bool, res: Outcome, timeout: int) -> None:
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "specbound.cli", "verify", *(["--no-kernels"] if fast else [])]
    try:
        proc = subprocess.run(cmd, cwd=repo, env=_env(repo), capture_output=True, text=True, timeout=timeout)
        res.verify = {0: "green", 1: "red"}.get(proc.returncode, f"error (exit {proc.returncode})")
        text = proc.stdout + proc.stderr
        # prove prints "FAILED <theorem>: ...", fuzz "FAILED <property>: ...", verify "FAILED prove: ..."
        res.verify_failures = sorted(set(re.findall(r"^FAILED (\S+?):", text, re.M)))
        if res.verify.startswith("error"):
            res.note += text[-600:]
    except subprocess.TimeoutExpired:
        res.verify = f"error (timeout {timeout} s)"
    res.verify_seconds = time.perf_counter() - start


def check_one(mutant: Mutant | None, args, source: Path) -> Outcome:
    res = Outcome(mutant.id if mutant else "control", mutant.models if mutant else "the unmutated copy")
    with tempfile.TemporaryDirectory(prefix="specbound-mutant-") as tmp:
        repo = copy_tree(Path(tmp), source)
        if mutant is not None:
            try:
                plant(mutant, repo)
            except ValueError as exc:
                res.planted, res.note = False, f"cannot plant: {exc}"
                return res
        _check_imports(repo)
        if not args.no_tests:
            run_tests(repo, args.pytest_args.split(), res, args.timeout)
        if not args.no_verify:
            run_verify(repo, args.fast, res, args.timeout)
    return res


def _brief(names: list[str]) -> str:
    """Failing checks for a table cell: specializations of one kernel theorem, or
    parametrizations of one test, folded into ``NAME[...] xN``."""
    groups: dict[str, int] = {}
    for name in names:
        head = name.split("[")[0] + ("[...]" if "[" in name else "")
        groups[head] = groups.get(head, 0) + 1
    return ", ".join(f"`{head}`" + (f" x{count}" if count > 1 else "") for head, count in groups.items())


def markdown(rows: list[Outcome], fast: bool) -> str:
    head = ("| mutant | what it plants | unit tests (first failure) | `specbound verify`"
            f"{' --no-kernels' if fast else ''} (failing checks) |\n|---|---|---|---|\n")
    lines = []
    for r in rows:
        tests = r.tests + (f" ({_brief([r.tests_first_failure])})" if r.tests_first_failure else "")
        verify = r.verify + (f" ({_brief(r.verify_failures)})" if r.verify_failures else "")
        if not r.planted:
            tests = verify = r.note
        lines.append(f"| `{r.id}` | {r.models} | {tests} | {verify} |")
    return head + "\n".join(lines) + "\n"


def verdict(rows: list[Outcome]) -> list[str]:
    """What makes the check fail: an unplantable mutant, a red control, a mutant the unit
    tests catch that verify misses."""
    problems = []
    for r in rows:
        if not r.planted:
            problems.append(f"{r.id}: {r.note}")
        elif r.id == "control" and "red" in (r.tests, r.verify):
            problems.append(f"control is not green: tests {r.tests}, verify {r.verify} {r.verify_failures}")
        elif r.id != "control" and r.tests == "red" and r.verify == "green":
            problems.append(f"{r.id}: the unit tests catch it ({r.tests_first_failure}) but verify does not")
        elif r.tests.startswith("error") or r.verify.startswith("error"):
            problems.append(f"{r.id}: tests {r.tests}, verify {r.verify}: {r.note[-300:]}")
    return problems


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", metavar="ID", help="this mutant only (repeatable)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--no-control", action="store_true", help="skip the unmutated control run")
    parser.add_argument("--no-tests", action="store_true", help="skip the unit tests")
    parser.add_argument("--no-verify", action="store_true", help="skip specbound verify")
    parser.add_argument("--fast", action="store_true", help="specbound verify --no-kernels")
    parser.add_argument("--pytest-args", default="", help="extra pytest arguments (e.g. a test path)")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds per command (default 3600)")
    parser.add_argument("--markdown", metavar="PATH", help="write the table here")
    parser.add_argument("--json", metavar="PATH", help="write the outcomes here")
    parser.add_argument("--render", metavar="JSON", help="print (and --markdown) the table of a saved --json run")
    args = parser.parse_args(argv)
    if args.render:
        rows = [Outcome(**r) for r in json.loads(Path(args.render).read_text())]
        table = markdown(rows, args.fast)
        print(table)
        if args.markdown:
            Path(args.markdown).write_text(table)
        return 1 if verdict(rows) else 0
    if args.list:
        for m in MUTANTS:
            print(f"{m.id:30s} {m.path:28s} {m.models}")
        return 0
    known = {m.id: m for m in MUTANTS}
    unknown = [i for i in args.only or [] if i not in known]
    if unknown:
        parser.error(f"--only: unknown mutant(s) {', '.join(unknown)}; see --list")
    chosen = [known[i] for i in args.only] if args.only else list(MUTANTS)
    plan = ([] if args.no_control else [None]) + chosen
    rows = []
    with tempfile.TemporaryDirectory(prefix="specbound-snapshot-") as stage:
        source = snapshot(Path(stage) / "tree")
        for mutant in plan:
            res = check_one(mutant, args, source)
            rows.append(res)
            print(f"{res.id:30s} tests {res.tests:6s} {res.tests_seconds:6.0f} s {res.tests_first_failure[:60]:60s} "
                  f"verify {res.verify:6s} {res.verify_seconds:5.0f} s {' '.join(res.verify_failures)[:120]}"
                  f"{' ' + res.note[:200] if not res.planted else ''}", flush=True)
    table = markdown(rows, args.fast)
    print("\n" + table)
    if args.markdown:
        Path(args.markdown).write_text(table)
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    problems = verdict(rows)
    for p in problems:
        print(f"PROBLEM {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
