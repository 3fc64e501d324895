"""Where a vLLM source tree is: ``--vllm-path DIR``, ``$SPECBOUND_VLLM_PATH``, or the cache
``~/.cache/specbound-vllm/<version>`` that :func:`fetch` fills from the release wheel (only
its ``.py`` files are unpacked)."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import zipfile

ENV = "SPECBOUND_VLLM_PATH"
DEFAULT_VERSION = "0.33.0"


class NotFound(ValueError):
    """No vLLM tree: the message names the argument and what was missing."""


def cache_dir(version: str) -> pathlib.Path:
    return pathlib.Path(os.path.expanduser("~/.cache/specbound-vllm")) / version


def package_root(path) -> pathlib.Path:
    """The ``vllm`` package folder at or under ``path`` (a site-packages, an unpacked wheel,
    or the package folder itself)."""
    p = pathlib.Path(path)
    for cand in (p, p / "vllm"):
        if (cand / "v1" / "sample" / "rejection_sampler.py").is_file():
            return cand
    raise NotFound(f"--vllm-path {path}: no vllm/v1/sample/rejection_sampler.py there "
                   "(give the folder holding the vllm package, or the package itself)")


def locate(path=None, version: str = DEFAULT_VERSION) -> pathlib.Path:
    """The vLLM package folder: ``path``, else ``$SPECBOUND_VLLM_PATH``, else the cache of
    ``version`` (filled by :func:`fetch`, never here: no download without being asked)."""
    if path is not None:
        return package_root(path)
    if os.environ.get(ENV):
        return package_root(os.environ[ENV])
    cached = cache_dir(version)
    if cached.is_dir():
        return package_root(cached)
    raise NotFound(f"no vLLM tree: pass --vllm-path DIR, set ${ENV}, or fetch {version} into {cached} "
                   "(specbound.engines.vllm.locate.fetch)")


def unpack_py(wheel: str, dest) -> pathlib.Path:
    """The ``vllm/**.py`` members of ``wheel`` unpacked under ``dest``."""
    dest = pathlib.Path(dest)
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if name.startswith("vllm/") and name.endswith(".py") and ".." not in name:
                z.extract(name, dest)
    return package_root(dest)


def fetch(version: str = DEFAULT_VERSION, wheel: str | None = None) -> pathlib.Path:
    """``pip download --no-deps vllm==version`` (or the given ``wheel``), ``.py`` files only,
    into :func:`cache_dir`."""
    dest = cache_dir(version)
    if dest.is_dir():
        return package_root(dest)
    tmp = None
    if wheel is None:
        tmp = tempfile.mkdtemp(prefix="specbound-vllm-")
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                        "-d", tmp, f"vllm=={version}"], check=True)
        wheels = sorted(pathlib.Path(tmp).glob("vllm-*.whl"))
        if not wheels:
            raise NotFound(f"pip download vllm=={version}: no wheel")
        wheel = str(wheels[0])
    part = dest.with_name(dest.name + ".part")
    if part.exists():
        shutil.rmtree(part)    # an earlier unpack cut short
    try:
        unpack_py(wheel, part)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp)    # the wheel (300+ MB) is not kept: only its .py files are read
    part.rename(dest)
    return package_root(dest)
