"""The one loader of Triton source text (specbound.kernels.source): Triton reads a loaded
kernel's lines back, a syntax error names the file name, and only the asked-for jit
functions of a file run."""

from __future__ import annotations

import inspect

import pytest

from specbound import kernels
from specbound.kernels import source

import torch  # noqa: E402  (after specbound.kernels: TRITON_INTERPRET)
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

TEXT = '''\
import sys


@triton.jit
def _double(x):
    return x * 2


@triton.jit
def add_one_doubled(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    ok = offs < n
    tl.store(dst_ptr + offs, _double(tl.load(src_ptr + offs, mask=ok)) + 1, mask=ok)


def not_a_kernel():
    sys.exit("must not run")


not_a_kernel()
'''


def _namespace():
    return {"triton": triton, "tl": tl}


def test_loaded_kernel_lines_are_visible_to_inspect_and_triton(tmp_path):
    name = "<specbound-test loaded kernel>"
    ns = source.load_jit_functions(TEXT, name, _namespace(), roots=["add_one_doubled"])
    assert "not_a_kernel" not in ns  # only the kernel and the jit helper it calls ran
    kernel = ns["add_one_doubled"]
    # Triton reads the function's text through inspect (the reason for linecache)
    assert inspect.getsource(kernel.fn).lstrip().startswith("@triton.jit\ndef add_one_doubled(")
    first = inspect.getsourcelines(kernel.fn)[1]  # at its own line of the text
    assert TEXT.splitlines()[first].startswith("def add_one_doubled(")
    if kernels.INTERPRETED:
        # the interpreter re-compiles the kernel from its text (scalars assigned become
        # tensors); with no text it silently runs the raw Python function instead
        assert kernel.rewrite() is not kernel.fn
        src = torch.arange(5, dtype=torch.int64)
        dst = torch.zeros(5, dtype=torch.int64)
        kernel[(1,)](src, dst, 5, BLOCK=8)
        assert dst.tolist() == [1, 3, 5, 7, 9]


def test_without_registration_triton_cannot_read_the_kernel(monkeypatch):
    # The planted fault: the text compiled but not registered in linecache.
    monkeypatch.setattr(source, "register", lambda filename, text: None)
    name = "<specbound-test unregistered>"
    if kernels.INTERPRETED:
        kernel = source.load_jit_functions(TEXT, name, _namespace(), roots=["add_one_doubled"])["add_one_doubled"]
        with pytest.raises(OSError):
            inspect.getsource(kernel.fn)
        assert kernel.rewrite() is kernel.fn  # Triton's silent fallback: not the interpreted semantics
    else:
        with pytest.raises(OSError):  # the compiler reads the source when the kernel is defined
            source.load_jit_functions(TEXT, name, _namespace(), roots=["add_one_doubled"])


def test_syntax_error_names_the_file_name():
    broken = TEXT.replace("return x * 2", "return x *")
    with pytest.raises(SyntaxError) as info:
        source.load_jit_functions(broken, "<specbound-test broken kernel>", _namespace())
    assert info.value.filename == "<specbound-test broken kernel>"
    assert "<specbound-test broken kernel>" in str(info.value)
    with pytest.raises(SyntaxError, match="specbound-test broken text"):
        source.load("def f(:\n", "<specbound-test broken text>", {})


def test_missing_root_is_named():
    with pytest.raises(LookupError, match=r"'no_such_kernel'.*<specbound-test file>"):
        source.load_jit_functions(TEXT, "<specbound-test file>", _namespace(), roots=["no_such_kernel"])


def test_future_flags_carry_over():
    # a file with `from __future__ import annotations` keeps its annotations as strings
    ns = source.load_jit_functions("from __future__ import annotations\n" + TEXT, "<specbound-test future>",
                                   _namespace(), roots=["add_one_doubled"])
    assert ns["add_one_doubled"].fn.__annotations__["BLOCK"] == "tl.constexpr"
    ns = source.load_jit_functions(TEXT, "<specbound-test no future>", _namespace(), roots=["add_one_doubled"])
    assert ns["add_one_doubled"].fn.__annotations__["BLOCK"] is tl.constexpr
