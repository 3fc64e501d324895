"""Running a property outside pytest: a bounded Hypothesis search that returns, instead of
raising, the number of examples run and the minimal failing case (Hypothesis replays the
shrunk example last, so the last failing case seen is the minimal one).

Every case checked is folded, in order, into :attr:`RunResult.cases_digest`: two runs
with the same seed check the same cases exactly when their digests agree (what
``specbound fuzz --seed S`` promises), and the report says which cases a run saw
without listing them.  A run's cases depend on its seed alone, not on what the process
ran before (:func:`no_local_constants`)."""

from __future__ import annotations

import hashlib
import importlib.util
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable

from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import seed as fixed_seed


# Hypothesis' phases without shrinking (nor explaining a shrunk case): the first failing case is the answer.
NO_SHRINK = [phase for phase in Phase if phase not in (Phase.shrink, Phase.explain)]


@dataclass
class RunResult:
    name: str
    examples: int = 0
    failures: int = 0
    seconds: float = 0.0
    case: object | None = None       # the minimal failing case
    message: str = ""
    seeds: list = field(default_factory=list)
    digest: object = field(default_factory=hashlib.sha256, repr=False, compare=False)

    @property
    def per_minute(self) -> float:
        return 60.0 * self.examples / self.seconds if self.seconds else 0.0

    def saw(self, case_text: str) -> None:
        """Fold one checked case (its JSON text) into :attr:`cases_digest`."""
        self.digest.update(case_text.encode() + b"\n")

    @property
    def cases_digest(self) -> str:
        return self.digest.hexdigest()[:16]

    def __getstate__(self) -> dict:
        # a finished result crosses to the parent process of a parallel run (``specbound
        # verify``); a hash object does not pickle, so its digest travels as text
        return {**self.__dict__, "digest": _Finished(self.digest.hexdigest())}


class _Finished:
    """The digest of a result that crossed a process boundary: read-only, since the cases
    it folded were checked in the other process."""

    def __init__(self, hexdigest: str):
        self._hex = hexdigest

    def hexdigest(self) -> str:
        return self._hex

    def update(self, data: bytes) -> None:
        raise RuntimeError("the cases of this result were checked in another process; its digest is final")


@contextmanager
def no_local_constants():
    """Hypothesis draws, in a few percent of its draws, a constant from the source of the
    "local" modules (outside site-packages) in ``sys.modules`` *when the case is drawn*:
    which specbound modules a process had imported (another check run first by the same
    ``verify`` worker, a lazy import inside a check) changed the cases of a seed.  Within
    this block that pool is empty, so the cases are the seed's alone; the boundary values
    it would bring are our explicit examples' job.  Hypothesis has no setting for this,
    hence its internals: a Hypothesis that renamed them fails here, loudly."""
    from hypothesis.internal.conjecture import providers
    if importlib.util.find_spec("hypothesis.internal.constants_ast") is None:
        yield              # a Hypothesis from before it pooled the source's constants: nothing to empty
        return
    if not (hasattr(providers, "_get_local_constants") and hasattr(providers, "CONSTANTS_CACHE")):
        import hypothesis
        raise RuntimeError(f"hypothesis {hypothesis.__version__} has no providers._get_local_constants / "
                           "CONSTANTS_CACHE: find how it now pools local constants and empty that pool "
                           "here, or seeded runs depend on what the process imported before")
    from hypothesis.internal.constants_ast import Constants
    pooled = providers._get_local_constants
    providers._get_local_constants = Constants     # an empty pool
    providers.CONSTANTS_CACHE.cache.clear()        # it caches the permitted constants of each draw
    try:
        yield
    finally:
        providers._get_local_constants = pooled
        providers.CONSTANTS_CACHE.cache.clear()


def describe(exc: BaseException) -> str:
    """``Type: message`` of an exception, and where it was raised when it is not a
    property's own verdict (a raw IndexError deep in an implementation says where)."""
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, AssertionError):
        return text
    frames = traceback.extract_tb(exc.__traceback__)
    if frames:
        last = frames[-1]
        text += f" (raised at {last.filename.split('/specbound/')[-1]}:{last.lineno} in {last.name})"
    return text


def run_property(name: str, check: Callable, strategy, *, max_examples: int, seed: int | None = None,
                 derandomize: bool = False, use_database: bool = True, result: RunResult | None = None,
                 examples=(), shrink: bool = True) -> RunResult:
    """Search ``strategy`` for a case where ``check`` raises (anything: an AssertionError, a
    SpecArgumentError, an IndexError ... is the property's failure, never the caller's);
    shrink it (unless ``shrink`` is False: then the first failing case found); return the
    outcome.  ``examples`` are tried first, as ``@example`` cases."""
    res = result or RunResult(name)
    last_failure: dict = {}

    def body(case):
        res.examples += 1
        res.saw(case.to_json())
        try:
            check(case)
        except Exception as exc:
            last_failure["case"], last_failure["exc"] = case, exc
            raise

    body._hypothesis_internal_add_digest = name.encode()  # one database key per property
    opts = dict(max_examples=max_examples, deadline=None, derandomize=derandomize,
                database=settings.default.database if use_database and not derandomize else None,
                suppress_health_check=list(HealthCheck), print_blob=False)
    if not shrink:
        opts["phases"] = NO_SHRINK
    test = given(strategy)(body)
    for case in reversed(list(examples)):   # @example order: the first listed runs first
        test = example(case)(test)
    test = settings(**opts)(test)
    if seed is not None and not derandomize:
        test = fixed_seed(seed)(test)   # no example database either: the run is its seed's alone
        res.seeds.append(seed)
    start = time.perf_counter()
    try:
        with no_local_constants():
            test()
    except Exception as exc:  # the minimal example was replayed last
        res.failures += 1
        res.case = last_failure.get("case")
        res.message = describe(last_failure.get("exc", exc))
    finally:
        res.seconds += time.perf_counter() - start
    return res


def falsify(check: Callable, strategy, max_examples: int = 200, seed: int = 0, shrink: bool = True):
    """The minimal case where ``check`` fails, or None (for tests of planted bugs); with
    ``shrink=False`` the first failing case, for a test that asks only whether a property
    catches a bug (shrinking a kernel case replays it on the interpreter dozens of times)."""
    res = run_property("falsify", check, strategy, max_examples=max_examples, seed=seed, use_database=False,
                       shrink=shrink)
    return res.case if res.failures else None
