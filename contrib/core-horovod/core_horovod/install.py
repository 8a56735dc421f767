"""``python -m core_horovod.install``: build Horovod 0.28.1 for this torch once, cache the wheel, install it.

Horovod's last release ships only as an sdist whose CMake files ask for C++14, while torch 2.x's headers need
C++17. The build runs with a compiler wrapper that replaces ``-std=c++14`` by ``-std=c++17`` (Horovod's
sources are left untouched), with PyTorch and Gloo support and without MPI, TensorFlow and MXNet.

The wrapper also compiles at ``-O0`` without debug information, where Horovod's CMake asks for ``-O3 -g``
(``RelWithDebInfo``, raised to -O3). Measured on 2 cores: 219 s and an 18.6 MB wheel as Horovod asks, 194 s
and 1.1 MB without ``-g``, 141 s and 1.0 MB at ``-O1``; on a busy machine, 194 s of CPU at ``-O1`` against 146 s
at ``-O0`` (2.1 MB). On the CPU a Horovod step spends its time in torch's kernels and gloo's TCP transport, not in
Horovod's own loops: contrib/core-horovod/tests/test_horovod_run.py (21 tests, 2-process jobs) took 50.3 s with
the ``-O1`` build and 47.7 s with the ``-O0`` one. This build exists for that CPU path (a GPU build needs NCCL
and Horovod's own instructions). ``--optimize 3`` builds as Horovod asks.

The wheel is kept in a cache directory (``CORE_HOROVOD_WHEEL_CACHE``, default ``~/.cache/core-horovod/wheels``),
so a second install takes seconds. It needs ``cmake`` and ``g++`` (``apt-get install cmake g++``).

``--build-only`` fills the cache and installs nothing. It uses only the standard library, so it can run as a
script (``python core_horovod/install.py --build-only``) before core-horovod is installed: ``make setup-all``
builds this way in the background, while pip installs the rest, and installs the cached wheel at the end.
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
# Horovod's own choice, and the one this installer builds at unless told otherwise (see the module's docstring).
HOROVOD_OPTIMIZATION: Final = 3
DEFAULT_OPTIMIZATION: Final = 0
_WRAPPER: Final = """#!/bin/sh
# {compiler} with -std=c++14 replaced by -std=c++17 (torch's headers need C++17; Horovod 0.28.1 asks for 14),
# -O2/-O3 by -O{optimization}, and -g dropped unless building as Horovod asks ({keep_debug}).
for argument in "$@"; do
  shift
  case "$argument" in
    -std=c++14) argument="-std=c++17" ;;
    -O2|-O3) argument="-O{optimization}" ;;
    -g) if [ "{keep_debug}" = "no" ]; then continue; fi ;;
  esac
  set -- "$@" "$argument"
done
exec {compiler} "$@"
"""


def compiler_wrapper(compiler: str, optimization: int) -> str:
    """The text of the shell script that the build uses as its C++ compiler (see ``_WRAPPER``)."""
    if optimization not in (0, 1, 2, 3):
        raise InstallError(f"optimization={optimization!r}: expected 0, 1, 2 or 3 (gcc's -O levels)")
    keep_debug = "yes" if optimization == HOROVOD_OPTIMIZATION else "no"
    return _WRAPPER.format(compiler=compiler, optimization=optimization, keep_debug=keep_debug)


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


def build(cache: Path, optimization: int = DEFAULT_OPTIMIZATION) -> Path:
    """Build the wheel into ``cache`` at gcc's ``-O{optimization}`` and return it."""
    missing = [tool for tool in ("cmake", "g++") if shutil.which(tool) is None]
    if missing:
        raise InstallError(f"building Horovod needs {' and '.join(missing)}: apt-get install cmake g++")
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="core-horovod-build-") as scratch:
        wrapper = Path(scratch) / "cxx17"
        wrapper.write_text(compiler_wrapper(os.environ.get("CXX", "g++"), optimization))
        wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
        environment = {**os.environ, **BUILD_VARIABLES, "CXX": str(wrapper), "MAKEFLAGS": f"-j{os.cpu_count() or 1}"}
        log = Path(scratch) / "build.log"
        with open(log, "w") as output:
            finished = subprocess.run(
                # --no-cache-dir: pip would otherwise hand back a wheel it built before, with other flags.
                [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-cache-dir",
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


def ensure_wheel(force_build: bool = False, optimization: int = DEFAULT_OPTIMIZATION) -> Path:
    """The cached wheel, built first when there is none (or when ``force_build``)."""
    cache = cache_directory()
    wheel = None if force_build else cached_wheel(cache)
    if wheel is None:
        print(f"core-horovod: building Horovod {VERSION} with C++17 at -O{optimization} (2-4 minutes), caching it "
              f"in {cache}", flush=True)
        wheel = build(cache, optimization)
    return wheel


def install(force_build: bool = False, optimization: int = DEFAULT_OPTIMIZATION) -> Path:
    """Install Horovod from the cached wheel, building it first when there is none; return the wheel."""
    wheel = ensure_wheel(force_build, optimization)
    # pip keeps an installed horovod of the same version rather than take this wheel: replace it, then let pip
    # add the requirements (cloudpickle, psutil, pyyaml, packaging) a fresh environment lacks.
    pip = [sys.executable, "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, "--force-reinstall", "--no-deps", str(wheel)], check=True)
    subprocess.run([*pip, str(wheel)], check=True)
    return wheel


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m core_horovod.install", description=__doc__)
    parser.add_argument("--force-build", action="store_true", help="rebuild even when a cached wheel exists")
    parser.add_argument("--if-missing", action="store_true", help="do nothing when Horovod is already installed")
    parser.add_argument(
        "--build-only", action="store_true",
        help="build the wheel into the cache unless one is there, and install nothing",
    )
    parser.add_argument(
        "--optimize", type=int, choices=(0, 1, 2, 3), default=DEFAULT_OPTIMIZATION,
        help=f"gcc's -O level for a build (default {DEFAULT_OPTIMIZATION}; {HOROVOD_OPTIMIZATION} with debug "
        f"information is Horovod's own choice)",
    )
    options = parser.parse_args(argv)
    if options.if_missing and installed_version() == VERSION:
        print(f"core-horovod: Horovod {VERSION} is already installed")
        return 0
    try:
        if options.build_only:
            wheel = ensure_wheel(force_build=options.force_build, optimization=options.optimize)
            print(f"core-horovod: the wheel is {wheel}")
            return 0
        wheel = install(force_build=options.force_build, optimization=options.optimize)
    except InstallError as error:
        print(f"core-horovod: {error}", file=sys.stderr)
        return 1
    print(f"core-horovod: installed {wheel.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
