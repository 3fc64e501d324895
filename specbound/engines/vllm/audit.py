"""``specbound audit vllm``: prove vLLM's speculative-decoding Triton kernels from a release's
source text (never imported), with the statuses and exit codes of ``audit sglang``
(:mod:`specbound.audit.report`): ``proved``; ``refuted`` (a counterexample replayed on vLLM's
own kernel under the checked interpreter, with the serving configuration that reaches it);
``holds only if`` (the property fails only outside a bound vLLM never checks: the bound, and
whether a real configuration reaches it, in the detail); ``unknown`` / ``error`` when a proof
did not finish or the kernel could not be read.  ``--json`` and ``--sarif`` (SARIF 2.1.0, one
result per finding on its kernel's ``def`` line) are the machine outputs.

Exit status: 1 when a row is ``refuted`` or ``holds only if``; 3 when nothing was found but a
row is ``unknown``/``error`` or no vLLM tree was found; 0 otherwise; 2 a bad command line.
"""

from __future__ import annotations

import json
import pathlib
import time
from dataclasses import asdict, dataclass, field

from specbound.audit.report import (
    ERROR, EXIT_FINDING, EXIT_INCOMPLETE, FAILING, HOLDS_ONLY_IF, INCOMPLETE, PROVED, REFUTED, UNKNOWN, Row,
)

from . import contract, locate, releases
from specbound import __version__
from specbound.audit.sarif import sarif_log, write_log
from specbound.cli_common import add_output_option, verdict

# the replay of each kernel's refuted row product (the recovered-token kernel's runs only the
# wrapping request's programs of the grid: see replay.recovered_tokens)
REPLAYS = {"rejection_random_sample_kernel": "random_sample", "sample_recovered_tokens_kernel": "recovered_tokens"}
# the replay of a stored index outside its consumer's rows
INDEX_REPLAYS = {"eagle_prepare_inputs_padded_kernel": "prepare_inputs_padded"}


@dataclass
class VllmReport:
    vllm_path: str | None
    rows: list = field(default_factory=list)
    findings: list = field(default_factory=list)
    seconds: float = 0.0
    fatal: str | None = None
    variants: dict = field(default_factory=dict)   # kernel -> the older signature audited (releases.py)
    absent: list = field(default_factory=list)      # kernels this release does not have

    def exit_code(self) -> int:
        if any(r.status in FAILING for r in self.rows):
            return EXIT_FINDING
        if self.fatal or any(r.status in INCOMPLETE for r in self.rows):
            return EXIT_INCOMPLETE
        return 0

    def counts(self) -> dict:
        out: dict = {}
        for r in self.rows:
            out[r.status] = out.get(r.status, 0) + 1
        return out

    def to_json(self) -> dict:
        return {"vllm": {"path": self.vllm_path}, "seconds": round(self.seconds, 2),
                "summary": {"counts": self.counts(), "fatal": self.fatal, "exit": self.exit_code()},
                "rows": [asdict(r) for r in self.rows], "findings": [asdict(f) for f in self.findings],
                "variants": self.variants, "absent": self.absent,
                "contract": contract_rows()}

    def render(self) -> str:
        lines = [f"vllm at {self.vllm_path}" if self.vllm_path else f"vllm: not found ({self.fatal})"]
        for r in self.rows:
            lines.append(f"{r.status:>14}  {r.id}  ({r.seconds:.1f}s)")
            if r.status != PROVED and r.detail:
                lines.append(f"{'':>16}{r.detail}")
        for name, what in self.variants.items():
            lines.append(f"  {name}: {what}")
        if self.absent:
            lines.append(f"  not in this release: {', '.join(self.absent)}")
        relied = [f for k in contract.KERNELS for f in contract.facts(k) if f.kind == "relied"]
        if relied:
            lines.append("relied on, never checked by vLLM:")
            for name in sorted({f.name for f in relied}):
                f = next(x for x in relied if x.name == name)
                lines.append(f"  {name}: {f.formula} ({f.cite})")
        return "\n".join(lines)


def contract_rows() -> list:
    return [{"kernel": k.name, "launch": k.launch, "grid": list(k.grid),
             "buffers": [{"arg": b.arg, "shape": b.shape, "dtype": b.dtype, "cite": b.cite} for b in k.buffers],
             "facts": [asdict(f) for f in contract.facts(k)]} for k in contract.KERNELS]


def _findings_detail(fs) -> tuple[str, dict, dict]:
    f = next((x for x in fs if x.status == "refuted"), fs[0])
    cex = {"model": f.model, "vocab_size": f.vocab_size, "num_tokens": f.min_num_tokens or None,
           "obligation": f.obligation}
    return "; ".join(f"{x.obligation}: {x.status}: {x.detail}" for x in fs), cex, f.configuration


def run_audit(path=None, kernels=None, replay: bool = True) -> VllmReport:
    # the symbolic executor and the replays load only when this audit runs, not on every
    # command's start-up (the parser registers `audit vllm`)
    from . import prove, refute
    from . import replay as replays

    start = time.perf_counter()
    try:
        root = locate.locate(path)
    except locate.NotFound as exc:
        return VllmReport(None, fatal=str(exc))
    rep = VllmReport(str(root))
    for kernel in contract.KERNELS:
        if kernels and kernel.name not in kernels:
            continue
        t0 = time.perf_counter()
        try:
            source = (root / kernel.file).read_text() if (root / kernel.file).is_file() else ""
            if f"def {kernel.name}(" not in source:
                rep.absent.append(kernel.name)   # a release before the kernel was written: no row
                continue
            kernel, variant = releases.adapt(kernel, source)
            if variant is not None:
                rep.variants[kernel.name] = f"signature of vLLM {variant.releases} ({variant.difference()}): {variant.note}"
            results = prove.prove_kernel(root, kernel)
        except Exception as exc:  # noqa: BLE001 - a kernel the executor cannot read is a row, not a crash
            rep.rows.append(Row(f"vllm.{kernel.name}", f"{kernel.file}:{kernel.name}", "symbolic proof", "symexec",
                                ERROR, f"{type(exc).__name__}: {exc}", seconds=time.perf_counter() - t0))
            continue
        found = []   # the refuted rows' findings: int32 products, stored indices
        if any(r.status != "proved" and "-NO-WRAP[" in r.id for r in results):
            fn = getattr(replays, REPLAYS[kernel.name]) if replay and kernel.name in REPLAYS else None
            found = refute.refute_row_products(
                root, kernel, (lambda k, sp, v, c: fn(root, k, sp, v, c)) if fn else None)
            rep.findings += found
        if any(r.status != "proved" and "-INDEX-IN-RANGE[" in r.id for r in results):
            fn = getattr(replays, INDEX_REPLAYS[kernel.name]) if replay and kernel.name in INDEX_REPLAYS else None
            more = refute.refute_stored_index(root, kernel, (lambda k, sp: fn(root, k, sp)) if fn else None)
            found += more
            rep.findings += more
        for r in results:
            status, detail, cex, conf = PROVED, "", None, None
            if r.status != "proved":
                status, detail = (UNKNOWN if r.status == "unknown" else REFUTED), r.detail
                mine = [f for f in found if r.id.endswith(f"[{f.specialization}]")
                        and f"-{'INDEX-IN-RANGE' if f.obligation.startswith('index-in-range') else 'NO-WRAP'}[" in r.id]
                if mine:
                    detail, cex, conf = _findings_detail(mine)
                    if all(f.status != "refuted" for f in mine):
                        status = HOLDS_ONLY_IF   # solver counterexamples, none replayed here
                elif status == REFUTED:
                    status = HOLDS_ONLY_IF      # no replay of it: never "refuted"
            rep.rows.append(Row(f"vllm.{r.id}", f"{kernel.file}:{kernel.name}", r.statement.split(" (obligations")[0],
                                "symexec", status, detail, cex, {"configuration": conf} if conf else None,
                                seconds=r.seconds))
    rep.seconds = time.perf_counter() - start
    return rep


def kernel_line(root, kernel) -> int:
    """The line of ``def <kernel>`` in the release's source (1 when it cannot be read)."""
    try:
        text = (locate.package_root(root) / kernel.file).read_text()
    except (OSError, ValueError):
        return 1
    fn = contract.kernel_def(kernel.name, text)
    return fn.lineno if fn else 1


def to_sarif(rep: VllmReport) -> dict:
    """The SARIF log of a vLLM audit: one result per finding (``error``), on the kernel's ``def``
    line in its file, relative to the audited ``vllm`` package (base id ``VLLM_ROOT``)."""
    root = locate.package_root(rep.vllm_path) if rep.vllm_path else None
    lines = {k.name: (k.file, kernel_line(root, k)) for k in contract.KERNELS} if root else {}

    def where(row):
        return next((at for name, at in lines.items() if row.subject.endswith(":" + name)), None)

    return sarif_log(rep.rows, __version__, base="VLLM_ROOT", root=str(root) if root else None,
                     exit_code=rep.exit_code(), successful=not rep.fatal,
                     properties={"vllm": rep.vllm_path, "counts": rep.counts()}, where_of=where)


def cmd_audit_vllm(args) -> int:
    rep = run_audit(args.vllm_path, replay=not args.no_replay)
    print(rep.render())
    if args.json:   # the folder exists: checked before the run (cli_common.check_outputs)
        pathlib.Path(args.json).write_text(json.dumps(rep.to_json(), indent=2, default=str) + "\n")
    if args.sarif:
        write_log(to_sarif(rep), args.sarif)
    rc = rep.exit_code()
    counts = ", ".join(f"{v} {k}" for k, v in rep.counts().items()) or (rep.fatal or "no rows")
    verdict("audit", rc == 0, f"{len(rep.rows)} rows: {counts}", word="INCOMPLETE" if rc == EXIT_INCOMPLETE else None)
    return rc


def register(targets) -> None:
    import argparse

    p = targets.add_parser("vllm", help="prove vLLM's speculative-decoding Triton kernels from its source text "
                           "(never imported)", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_output_option(p)
    add_output_option(p, "--sarif", help="write the findings as SARIF 2.1.0 here (GitHub code scanning)")
    p.add_argument("--vllm-path", metavar="DIR", help="the vllm package folder, or a folder holding vllm/ "
                   f"(also ${locate.ENV}; else the cache {locate.cache_dir(locate.DEFAULT_VERSION)})")
    p.add_argument("--no-replay", action="store_true", help="no replays under the checked interpreter")
    p.set_defaults(func=cmd_audit_vllm)


__all__ = ["run_audit", "register", "VllmReport", "ERROR", "UNKNOWN", "HOLDS_ONLY_IF"]
