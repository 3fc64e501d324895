"""What one symbolic run accumulates, and the primitives every semantic module adds with.

:class:`RunState` holds the path condition, the obligations raised so far (:class:`Ob`),
the functions introduced with their schemas, the program-local constants, the side proofs
of the oracle, and the state of program-written memory and of the truncation analysis.
The statement walker (:class:`~.interp.Executor`) extends it with the kernel's source and
its variables; the semantic modules (arith, truncation, reductions, tl_builtins, memory)
take the run as their first argument and touch only what is declared here (flow.py also
calls back into the walker: ``eval``, ``exec_block``, the helper depth and dropped names).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import z3

from .values import LANES, V, fresh_name, lane_vars_in, mentions


@dataclass(slots=True)
class Ob:
    """An obligation raised during execution: ``hyps (path, lanes, activation) => goal``."""

    kind: str           # "wrap" | "truncation" | "assert" | "divzero" | "cast" | "loopstep"
    line: int
    goal: Any
    path: list
    shape: tuple
    note: str
    active: Any = True  # activation condition (a mask), part of the hypotheses


@dataclass(slots=True)
class ExecResult:
    accesses: list
    obligations: list
    functions: dict          # FuncDecl name -> (FuncDecl, schema(app)) (contents, reductions, witnesses)
    pid: Any
    grid: Any
    local_consts: list       # program-local constants (pid, loop indices): renamed per copy
    side_proofs: list = field(default_factory=list)      # the oracle's proofs the run's terms rest on
    invariant_proofs: list = field(default_factory=list)  # loop invariants proved inductive (flow.py)
    content_hyps: dict = field(default_factory=dict)     # quantified hypotheses on contents (memory.py)
    # the launch's shape, set by the kernel's model after the run (its regions read them)
    block: Any = None          # requests one program handles
    extra_owner: bool = False  # program 0 also owns the cells before the first block (draft_kv)
    batch: Any = None          # the batch size (int or Z3 term)


class RunState:
    __slots__ = ("grid", "pid", "oracle", "path_cond", "accesses", "obligations", "functions",
                 "local_consts", "side_proofs", "invariant_proofs", "content_hyps", "seen_wrap",
                 "loops", "trunc_candidates", "trunc_raised", "store_mask", "mem", "initial_contents",
                 "symbolic_loops", "cur_env", "summarise_loops", "loop_ranges")

    def __init__(self, grid: list, oracle: Callable | None = None):
        self.grid = grid
        self.pid = [z3.Int(f"pid{i}") for i in range(len(grid))]
        self.oracle = oracle          # (name, hyps, goal) -> Proof | None: side facts that simplify terms
        self.path_cond: list = []     # [(label, BoolRef)]
        self.accesses: list = []
        self.obligations: list = []
        self.functions: dict = {}
        self.local_consts: list = []
        self.side_proofs: list = []
        self.invariant_proofs: list = []  # loop invariants proved inductive by the core (flow.py)
        self.content_hyps: dict = {}      # quantified hypotheses on contents the run introduces (memory.py)
        self.seen_wrap: set = set()       # (term id, line) already observed
        # truncation analysis (truncation.py)
        self.loops: dict = {}             # symbolic loop index name -> (stop, step)
        self.trunc_candidates: list = []  # comparisons base + arange < x, raised at the end unless a mask did
        self.trunc_raised: set = set()    # lane-free keys of bounds raised as mask conjuncts
        self.store_mask = None            # the mask of the tl.store whose value is being evaluated
        # program-written memory (flow.py, memory.py)
        self.mem: dict = {}               # tensor name -> flow.MemState (the program's own writes)
        self.initial_contents: dict = {}  # tensor name -> FuncDecl (contents before the launch)
        self.symbolic_loops = 0           # depth of symbolic loops being run
        self.cur_env: dict = {}           # the kernel's variables at this statement (accesses keep them)
        # loop summaries (flow.py, invariants.py): opt-in, and the (first, last) index of each
        # enclosing symbolic loop
        self.summarise_loops = False
        self.loop_ranges: list = []

    def result(self) -> ExecResult:
        return ExecResult(self.accesses, self.obligations, self.functions, self.pid, self.grid,
                          self.local_consts, self.side_proofs, self.invariant_proofs, self.content_hyps)

    # --- the path condition ----------------------------------------------------------------
    def push_path(self, label, cond):
        """Append a path condition under a label not yet on the path; the entry, for drop_path."""
        labels = {lb for lb, _ in self.path_cond}
        base, k = label, 1
        while label in labels:
            k += 1
            label = f"{base}#{k}"
        entry = (label, cond)
        self.path_cond.append(entry)
        return entry

    def drop_path(self, entry):
        for i in range(len(self.path_cond) - 1, -1, -1):
            if self.path_cond[i] is entry:
                del self.path_cond[i]
                return

    # --- obligations -----------------------------------------------------------------------
    def raise_ob(self, kind, line, goal, shape, note, active=True):
        # A goal that simplifies to True is dropped, except a truncation bound: it stays (proved
        # and witnessed like any other) so that NO-TRUNCATION of a specialization whose only
        # lane mask is trivially bounded (BLOCK_B = NODES = 1 prefix fill) is not empty.
        trivial = z3.is_true(z3.simplify(goal)) if z3.is_expr(goal) else goal is True
        if trivial and kind != "truncation":
            return
        self.obligations.append(Ob(kind, line, goal, list(self.path_cond), tuple(shape), note, active))

    def observe(self, v, line, what, active=True):
        """A value is observed: its mathematical value must fit its dtype (no wrap).  Values
        produced by ``+ - *`` carry ``arith`` until then: Triton's wrapped result and the
        mathematical one agree exactly when the latter fits."""
        if not isinstance(v, V) or v.dtype.is_bool or z3.is_bool(v.e):
            return
        if not v.arith:
            return  # a leaf (argument, lane, loaded value) or already observed: in range
        key = (v.e.get_id(), line)
        if key in self.seen_wrap:
            return
        self.seen_wrap.add(key)
        e = v.e
        self.raise_ob("wrap", line, z3.And(e >= v.dtype.lo(), e < v.dtype.hi()), v.shape,
                      f"{what} fits {v.dtype} (no wrap)", active)

    # --- side facts ------------------------------------------------------------------------
    def ask(self, name, hyps, goal):
        """The oracle's proof of ``goal`` under ``hyps`` and the content hypotheses the run
        has introduced so far, or None."""
        return self.oracle(name, {**self.content_hyps, **hyps}, goal)

    def define(self, e, base: str):
        """A fresh function ``F(program-local constants, lanes)`` standing for ``e``, with the
        definition ``F(args) == e[args]`` as its schema (label ``def/...``).  The definition is
        an ordinary hypothesis instance, so a query may first be tried without definitions
        (:data:`~.obligations.DEFINITION`): dropping hypotheses is sound, and a nested walk
        then stays one symbol per step instead of a term DEPTH deep."""
        local = [c for c in self.local_consts if mentions(e, c)]
        lanes = [LANES[i] for i in sorted(lane_vars_in(e))]
        formal = local + lanes
        sort = z3.BoolSort() if z3.is_bool(e) else z3.IntSort()
        F = z3.Function(fresh_name(base), *([z3.IntSort()] * len(formal)), sort)

        def schema(app, formal=formal, e=e, name=F.name()):
            body = z3.substitute(e, *zip(formal, app.children())) if formal else e
            return {f"def/{name}@{app}": app == body}
        self.functions[F.name()] = (F, schema)
        return F(*formal) if formal else F()
