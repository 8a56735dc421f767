"""``python -m core_horovod.install``: build Horovod 0.28.1 for this torch once, cache the wheel, install it.

Horovod's last release ships only as an sdist whose CMake files ask for C++14, while torch 2.x's headers need
C++17. The build runs with a compiler wrapper that replaces ``-std=c++14`` by ``-std=c++17`` (Horovod's
sources are left untouched), with PyTorch and Gloo support and without MPI, TensorFlow and MXNet. The wheel
is kept in a cache directory (``CORE_HOROVOD_WHEEL_CACHE``, default ``~/.cache/core-horovod/wheels``), so a
second install takes seconds. It needs ``cmake`` and ``g++`` (``apt-get install cmake g++``); about 2 to 3
minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Final

VERSION: Final = "0.28.1"
BUILD_VARIABLES: Final = {
    "HOROVOD_WITH_PYTORCH": "1",
    "HOROVOD_WITH_GLOO": "1",
    "HOROVOD_WITHOUT_MPI": "1",
    "HOROVOD_WITHOUT_TENSORFLOW": "1",
    "HOROVOD_WITHOUT_MXNET": "1",
}
_WRAPPER: Final = """#!/bin/sh
# {compiler} with -std=c++14 replaced by -std=c++17 (torch's headers need C++17; Horovod 0.28.1 asks for 14).
for argument in "$@"; do
  shift
  if [ "$argument" = "-std=c++14" ]; then argument="-std=c++17"; fi
  set -- "$@" "$argument"
done
exec {compiler} "$@"
"""


class InstallError(RuntimeError):
    """The build or the installation failed; the message says what to install or where the log is."""


def cache_directory() -> Path:
    configured = os.environ.get("CORE_HOROVOD_WHEEL_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "core-horovod" / "wheels"


def cached_wheel(cache: Path) -> Path | None:
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    found = sorted(cache.glob(f"horovod-{VERSION}-{tag}-*.whl"))
    return found[-1] if found else None


def installed_version() -> str | None:
    finished = subprocess.run(
        [sys.executable, "-c", "import horovod.torch, horovod; print(horovod.__version__)"],
        capture_output=True, text=True, check=False,
    )
    return finished.stdout.strip() if finished.returncode == 0 else None


def build(cache: Path) -> Path:
    """Build the wheel into ``cache`` and return it."""
    missing = [tool for tool in ("cmake", "g++") if shutil.which(tool) is None]
    if missing:
        raise InstallError(f"building Horovod needs {' and '.join(missing)}: apt-get install cmake g++")
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="core-horovod-build-") as scratch:
        wrapper = Path(scratch) / "cxx17"
        wrapper.write_text(_WRAPPER.format(compiler=os.environ.get("CXX", "g++")))
        wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
        environment = {**os.environ, **BUILD_VARIABLES, "CXX": str(wrapper), "MAKEFLAGS": f"-j{os.cpu_count() or 1}"}
        log = Path(scratch) / "build.log"
        with open(log, "w") as output:
            finished = subprocess.run(
                [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
                 f"horovod=={VERSION}", "--wheel-dir", str(cache)],
                env=environment, stdout=output, stderr=subprocess.STDOUT, check=False,
            )
        if finished.returncode != 0:
            kept = cache.parent / "build.log"
            shutil.copy(log, kept)
            raise InstallError(f"building Horovod {VERSION} failed (exit {finished.returncode}); the log: {kept}")
    wheel = cached_wheel(cache)
    if wheel is None:
        raise InstallError(f"pip reported success but left no horovod-{VERSION} wheel in {cache}")
    return wheel


def install(force_build: bool = False) -> Path:
    """Install Horovod from the cached wheel, building it first when there is none; return the wheel."""
    cache = cache_directory()
    wheel = None if force_build else cached_wheel(cache)
    if wheel is None:
        print(f"core-horovod: building Horovod {VERSION} with C++17 (2-3 minutes), caching it in {cache}", flush=True)
        wheel = build(cache)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", str(wheel)], check=True)
    return wheel


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m core_horovod.install", description=__doc__)
    parser.add_argument("--force-build", action="store_true", help="rebuild even when a cached wheel exists")
    parser.add_argument("--if-missing", action="store_true", help="do nothing when Horovod is already installed")
    options = parser.parse_args(argv)
    if options.if_missing and installed_version() == VERSION:
        print(f"core-horovod: Horovod {VERSION} is already installed")
        return 0
    try:
        wheel = install(force_build=options.force_build)
    except InstallError as error:
        print(f"core-horovod: {error}", file=sys.stderr)
        return 1
    print(f"core-horovod: installed {wheel.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
