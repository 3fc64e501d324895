"""Every verdict comes from the trusted core: no module but ``proofs/core_query.py`` (the core's
one query, imported by ``proofs/core.py`` alone) makes a Z3 solver.

A solver made elsewhere answers with its own settings and no Proof behind the answer, so a
``proved`` row resting on it would bypass the core's rules.  The check reads every module's
source with ``ast`` (nothing is imported) and names each place that makes a solver, an
optimizer, a fixedpoint engine or a tactic (which turns into a solver), directly or under an
alias: ``z3.Solver()``, ``import z3 as q; q.SolverFor(..)``, ``from z3 import Solver``,
``from z3 import *``, ``z3.Then(..).solver()``, ``z3.solve``/``z3.prove``, the C API
(``Z3_mk_solver``, ...), ``getattr(z3, "Solver")``, ``__import__("z3")``, and the core's
private ``_solve`` and its query module ``core_query``, which hand their solver back.
"""

from __future__ import annotations

import ast
import pathlib
import re
import shutil

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
FOLDERS = ("spec", "proofs", "reference", "kernels", "replay", "specbound", "tests", "bench")
CORE = "proofs/core.py"
CORE_QUERY = "proofs/core_query.py"
# Modules allowed to make a solver, and why.  A test that needs its own solver to build an
# attack on the core would be listed here with its reason; none does today.
EXEMPT = {CORE_QUERY: "the trusted core's one solver query: every solver of the project is made here",
          CORE: "the trusted core's rules: the one importer of core_query"}

# Names that make (or are) a solver whatever object they are read from.
SOLVER_NAMES = {"Solver", "SolverFor", "SimpleSolver", "Optimize", "Fixedpoint", "Tactic", "AndThen", "OrElse",
                "ParOr", "ParThen", "ParAndThen", "TryFor", "WithParams", "solve_using", "solver"}
# Generic names that make a solver only when read from the z3 module.
Z3_SOLVER_NAMES = {"Then", "With", "Repeat", "Cond", "When", "FailIf", "solve", "prove"}
C_API = re.compile(r"Z3_(mk_(simple_)?solver|mk_optimize|mk_fixedpoint|mk_tactic"
                   r"|solver_|optimize_|fixedpoint_|tactic_)")
# The core's query function and module: they return the solver they made (or ask it again).
CORE_PRIVATE = {"_solve", "core_query", "model_without", "ask_again"}
Z3_SUBMODULES = {"z3", "z3core"}


def _solver_name(name: str, from_z3: bool) -> bool:
    return (name in SOLVER_NAMES or name in CORE_PRIVATE or bool(C_API.match(name))
            or (from_z3 and name in Z3_SOLVER_NAMES))


def _is_z3_module(module: str | None) -> bool:
    return module is not None and (module == "z3" or module.startswith("z3."))


def _z3_aliases(tree: ast.AST) -> set[str]:
    """Names bound to the z3 module (or one of its submodules) anywhere in the file:
    imports, and plain assignments of such a name to another."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if _is_z3_module(a.name):
                    names.add(a.asname or a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and _is_z3_module(node.module):
            names.update(a.asname or a.name for a in node.names if a.name in Z3_SUBMODULES)
    assigns = [n for n in ast.walk(tree) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Name)]
    grew = True
    while grew:
        grew = False
        for node in assigns:
            if node.value.id in names:
                for t in node.targets:
                    if isinstance(t, ast.Name) and t.id not in names:
                        names.add(t.id)
                        grew = True
    return names


def _root_name(expr) -> str | None:
    while isinstance(expr, ast.Attribute):
        expr = expr.value
    return expr.id if isinstance(expr, ast.Name) else None


def _mentions(expr, names: set[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(expr))


def _call_name(call: ast.Call) -> str | None:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def solver_uses(source: str, filename: str = "<source>") -> list[str]:
    """``"line: what"`` for every place in ``source`` that makes (or names) a solver."""
    tree = ast.parse(source, filename)
    z3_names = _z3_aliases(tree)
    out = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[-1] in CORE_PRIVATE:
            out.append(f"{line}: from {node.module} import ... (the core's solver query)")
        elif isinstance(node, ast.Import) and any(a.name.split(".")[-1] in CORE_PRIVATE for a in node.names):
            out.append(f"{line}: import {', '.join(a.name for a in node.names)} (the core's solver query)")
        if isinstance(node, ast.ImportFrom):
            from_z3 = _is_z3_module(node.module)
            for a in node.names:
                if from_z3 and a.name == "*":
                    out.append(f"{line}: from {node.module} import * (brings Solver, solve, ...)")
                elif _solver_name(a.name, from_z3):
                    out.append(f"{line}: from {node.module} import {a.name}")
        elif isinstance(node, ast.Attribute):
            if _solver_name(node.attr, _root_name(node.value) in z3_names):
                out.append(f"{line}: {ast.unparse(node)}")
        elif isinstance(node, ast.Call):
            name, args = _call_name(node), node.args
            text = args[0].value if args and isinstance(args[0], ast.Constant) else None
            text2 = args[1].value if len(args) > 1 and isinstance(args[1], ast.Constant) else None
            if name == "getattr" and isinstance(text2, str) and _solver_name(text2, _mentions(args[0], z3_names)):
                out.append(f"{line}: {ast.unparse(node)}")
            elif name in ("__import__", "import_module") and isinstance(text, str) and _is_z3_module(text):
                out.append(f"{line}: {ast.unparse(node)} (z3 imported out of sight)")
        elif isinstance(node, ast.Subscript):
            key = node.slice
            if isinstance(key, ast.Constant) and isinstance(key.value, str) \
                    and _solver_name(key.value, _mentions(node.value, z3_names)):
                out.append(f"{line}: {ast.unparse(node)}")
    return sorted(set(out), key=lambda s: (int(s.split(":")[0]), s))


def modules(root: pathlib.Path):
    for folder in FOLDERS:
        yield from sorted((root / folder).rglob("*.py"))


def scan(root: pathlib.Path) -> dict[str, list[str]]:
    """Every module under ``root`` that makes a solver and is not exempt, with the places."""
    found = {}
    for path in modules(root):
        rel = path.relative_to(root).as_posix()
        if rel in EXEMPT:
            continue
        uses = solver_uses(path.read_text(encoding="utf-8"), rel)
        if uses:
            found[rel] = uses
    return found


def test_no_module_but_the_core_makes_a_solver():
    assert len(list(modules(ROOT))) > 100, "the project's modules were not found"
    assert scan(ROOT) == {}, "ask the core (core.check / core.satisfy) instead"


def test_the_exemptions_are_real_files_that_make_a_solver():
    """An exemption for a file that no longer makes a solver (or no longer exists) is stale."""
    for rel in EXEMPT:
        assert solver_uses((ROOT / rel).read_text(encoding="utf-8"), rel), rel


PLANTED = [
    "import z3\ns = z3.Solver()\ns.check()\n",
    "import z3 as q\nq.SolverFor('QF_LIA').check()\n",
    "from z3 import Solver\n",
    "from z3 import SimpleSolver as S\n",
    "from z3 import *\n",
    "from z3.z3 import Optimize\n",
    "import z3\nz3.Fixedpoint()\n",
    "import z3\nz3.Then('simplify', 'smt').solver()\n",
    "import z3\nz3.Tactic('smt').solver()\n",
    "import z3\nz3.With('smt', rlimit=5)\n",
    "import z3\nz3.solve(z3.Int('x') > 0)\n",
    "import z3\nz3.prove(z3.Int('x') == z3.Int('x'))\n",
    "import z3\nz3.solve_using(z3.Tactic('smt'), z3.Int('x') > 0)\n",
    "import z3\nmake = z3.SimpleSolver\n",
    "import z3\nmake = getattr(z3, 'Solver')\n",
    "import z3\ngetattr(z3, 'solve')(z3.Int('x') > 0)\n",
    "import z3\nz3.__dict__['Solver']()\n",
    "import z3\nvars(z3)['prove'](z3.BoolVal(True))\n",
    "import z3\nalias = z3\nother = alias\nother.solve(z3.Int('x') > 0)\n",
    "import z3.z3 as inner\ninner.prove(inner.BoolVal(True))\n",
    "from z3 import z3core\nz3core.Z3_mk_solver(ctx)\n",
    "from z3.z3core import Z3_mk_simple_solver\n",
    "import z3\nz3.Z3_solver_check(ctx, s)\n",
    "def f():\n    import z3 as local\n    return local.Repeat(local.Tactic('simplify'))\n",
    "q = __import__('z3')\n",
    "import importlib\nimportlib.import_module('z3').solve(x)\n",
    "from specbound.proofs.core import _solve\n",
    "from specbound.proofs import core\ncore._solve({}, [], (), 1, 0)\n",
    "from specbound.proofs.core_query import query\n",
    "from specbound.proofs import core_query\n",
    "import specbound.proofs.core_query as q\n",
    "from specbound.proofs import core\ncore.ask_again(solver, goal, [], 1)\n",
]


@pytest.mark.parametrize("source", PLANTED)
def test_a_planted_solver_is_found(source):
    assert solver_uses(source), source


CLEAN = [
    "import z3\nx = z3.Int('x')\nz3.simplify(x + 0)\n",
    "from z3 import Int, simplify, is_true\n",
    "from specbound.proofs import core\ncore.check('t', goal)\ncore.satisfy('w', {'h': goal})\n",
    "prop.check(case)\n",
    "def prove(sp):\n    return sp\nprove(1)\ntheorems.prove(spec)\nrunner.solve()\n",
    "import z3\nreport['prove'] = 1\n",
    "import z3\nz3.z3core.Z3_is_ground(ctx, ast)\n",
]


@pytest.mark.parametrize("source", CLEAN)
def test_terms_and_the_cores_api_are_not_solvers(source):
    assert solver_uses(source) == [], source


def test_the_cores_own_solver_is_seen():
    """The scanner is not blind to the real code: it finds the core's solver, and the core's
    import of the module that makes it."""
    uses = solver_uses((ROOT / CORE_QUERY).read_text(encoding="utf-8"), CORE_QUERY)
    assert any("z3.Solver" in u for u in uses), uses
    uses = solver_uses((ROOT / CORE).read_text(encoding="utf-8"), CORE)
    assert any("core_query" in u for u in uses), uses


def test_a_solver_planted_in_a_copy_of_the_project_is_named(tmp_path):
    """The scan of a tree: the core keeps its solver, a module with one planted (as the audit's
    path explorer once had it) is named, with the line."""
    for folder in FOLDERS:
        (tmp_path / folder).mkdir()
    shutil.copy(ROOT / CORE, tmp_path / CORE)
    shutil.copy(ROOT / CORE_QUERY, tmp_path / CORE_QUERY)
    explorer = (ROOT / "specbound" / "audit" / "helper_paths.py").read_text(encoding="utf-8")
    planted = explorer + "\n\ndef _solver(*facts):\n    s = z3.Solver()\n    s.add(*facts)\n    return s.check()\n"
    (tmp_path / "specbound" / "helper_paths.py").write_text(planted)
    (tmp_path / "tests" / "test_x.py").write_text("from z3 import Solver as S\n")
    (tmp_path / "spec" / "clean.py").write_text(explorer)
    found = scan(tmp_path)
    line = planted.count("\n", 0, planted.index("z3.Solver()")) + 1
    assert found == {"specbound/helper_paths.py": [f"{line}: z3.Solver"],
                     "tests/test_x.py": ["1: from z3 import Solver"]}, found
