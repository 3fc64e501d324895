"""The mutation check (bench/mutation_check.py) stays able to plant every registered bug:
a mutant whose text moved would silently check nothing, so it fails here first."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def mc():
    spec = importlib.util.spec_from_file_location("mutation_check", ROOT / "bench" / "mutation_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_every_mutant_plants_exactly_and_changes_its_file(mc, tmp_path):
    assert len({m.id for m in mc.MUTANTS}) == len(mc.MUTANTS)
    for m in mc.MUTANTS:
        target = tmp_path / m.id / m.path
        target.parent.mkdir(parents=True)
        shutil.copy(ROOT / m.path, target)
        mc.plant(m, tmp_path / m.id)
        assert target.read_text() != (ROOT / m.path).read_text(), m.id


def test_a_mutant_whose_text_moved_cannot_be_planted(mc, tmp_path):
    m = mc.Mutant("X", "spec/tree.py", (("text that is not in the file", "y"),), "")
    (tmp_path / "spec").mkdir()
    shutil.copy(ROOT / "spec" / "tree.py", tmp_path / "spec" / "tree.py")
    with pytest.raises(ValueError, match="exactly once, found it 0 times"):
        mc.plant(m, tmp_path)
    rows = [mc.Outcome("X", "", planted=False, note="cannot plant: moved"),
            mc.Outcome("Y", "", tests="red", verify="green"), mc.Outcome("Z", "", tests="red", verify="red")]
    assert [p.split(":")[0] for p in mc.verdict(rows)] == ["X", "Y"]


def test_the_copy_imports_its_own_specbound(mc, tmp_path):
    # every root package folder but specbound/ itself is mapped into the namespace
    packages = {p.parent.name for p in mc.ROOT.glob("*/__init__.py")} - {"specbound"}
    assert packages and packages == set(mc.NAMESPACED), (packages, mc.NAMESPACED)
    repo = mc.copy_tree(tmp_path)
    assert (repo / "spec" / "tree.py").is_file() and not (repo / ".git").exists()
    mc._check_imports(repo)
