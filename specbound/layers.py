"""The import layers of specbound, bottom up: which modules sit in which layer and what each
layer owns.  One table, read by the import-graph test (every import goes to the same layer or
one below) and by ``specbound docs`` (the layer table of ``docs/architecture.md`` and the
README), so the documented layering is the tested one."""

from __future__ import annotations

LAYERS = (  # (module prefix, layer), most specific first
    ("specbound.spec", 0),
    ("specbound.proofs.symexec", 5),
    ("specbound.proofs.test_", 9),
    ("specbound.proofs._checks", 9),   # the proof tests' shared assertions
    ("specbound.proofs.conftest", 9),  # the proof tests' shared fixtures
    ("specbound.proofs", 1),
    ("specbound.reference", 2),
    ("specbound.kernels", 3),
    ("specbound.replay", 4),
    ("specbound.fuzz.command", 9),     # `specbound fuzz`
    ("specbound.fuzz", 6),
    ("specbound.audit.command", 9),    # `specbound audit`
    ("specbound.audit", 7),
    ("specbound.engines.sglang.audit", 9),  # one `specbound audit sglang` run: every check
    ("specbound.engines.vllm.audit", 9),    # `specbound audit vllm`
    ("specbound.engines.vllm.matrix", 9),   # the vLLM release matrix script
    ("specbound.engines", 8),
    ("specbound.sglang", 8),           # the sglang drop-ins
)
TOP = 9  # every module not listed: the CLI, manifest, docs, reports, tests

# layer -> (name, what it owns)
OWNS = {
    0: ("spec", "the specification: buffer sizes, cells and preconditions as functions of ints or Z3 terms"),
    1: ("proof core and spec theorems", "the trusted core (the one maker of Z3 solvers), the theorem registry, "
        "the theorems about the spec"),
    2: ("reference", "PyTorch reference implementations of the spec"),
    3: ("kernels", "specbound's Triton kernels, their launch plans and the checked interpreter"),
    4: ("replay", "one launcher of a concrete batch on any Triton kernel (ours or an engine's, read by path) "
        "under the checked interpreter, and its verdict"),
    5: ("kernel verifier", "the symbolic executor of Triton kernels, the verifiers of our kernels, the "
        "theorems of an engine's kernel (engine_theorems)"),
    6: ("fuzz", "property-based tests of the kernels against the spec and the reference"),
    7: ("audit core", "engine-neutral audit machinery: the source index, the program tracer and the bindings an "
        "engine passes it, judges, the report, statuses and SARIF, the kernel-launch helpers"),
    8: ("engine adapters", "one package per serving engine (where its kernels live, its launch sites and "
        "host contracts, symbolic models, replays, releases), the CUDA audit, the sglang drop-ins"),
    9: ("CLI", "the command line and command modules, manifest, docs, reports, and every test"),
}


def layer(module: str) -> int:
    """The layer of a dotted module name (``specbound.x.y``)."""
    for prefix, level in LAYERS:
        if module == prefix or module.startswith(prefix + ".") or (prefix.endswith("_") and module.startswith(prefix)):
            return level
    return TOP


def table() -> str:
    """The layers as a Markdown table, bottom up, each with its module prefixes."""
    rows = ["| layer | name | modules | owns |", "|---|---|---|---|"]
    for level in sorted(OWNS):
        prefixes = [p.removeprefix("specbound.") for p, lv in LAYERS if lv == level]
        mods = ", ".join(f"`{p}`" for p in prefixes) or "every module not listed"
        if level == TOP:
            mods = "every module not listed" + (f", and {mods}" if prefixes else "")
        name, owns = OWNS[level]
        rows.append(f"| {level} | {name} | {mods} | {owns} |")
    return "\n".join(rows)
