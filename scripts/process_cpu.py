"""Which started processes use the test suite's CPU: a per-process CPU log for every Python process of the venv.

The suite is CPU-bound on the 2-core CI machine, and most of its CPU goes to starting processes (each imports
torch: 2-3 s of CPU here). This tool tells which commands those are and how often they start:

    python scripts/process_cpu.py install                # a .pth hook in the venv, inactive until the variable below
    CORE_PROCESS_CPU_LOG=/tmp/cpu.jsonl make unit         # every Python process appends one line when it exits
    python scripts/process_cpu.py report /tmp/cpu.jsonl   # CPU seconds and process counts per command, largest first
    python scripts/process_cpu.py uninstall

A process that ends by ``os._exit`` or a signal writes no line (killed ranks, SIGKILLed daemons), and non-Python
processes (slurmd, mpirun, the hivemind daemon) are not seen: the report is a lower bound, labelled as such.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import sysconfig
from pathlib import Path

HOOK_MODULE = "_core_process_cpu"
HOOK_PTH = "zz_core_process_cpu.pth"
# The hook costs nothing unless CORE_PROCESS_CPU_LOG is set: one environment lookup at start-up.
HOOK_SOURCE = '''"""Installed by scripts/process_cpu.py: with CORE_PROCESS_CPU_LOG set, log CPU at exit."""
import os

_LOG = os.environ.get("CORE_PROCESS_CPU_LOG")
if _LOG:
    import atexit
    import json
    import resource
    import sys
    import time

    _STARTED = time.monotonic()

    def _write() -> None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        line = json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "argv": sys.argv, "orig_argv": sys.orig_argv,
                           "user": usage.ru_utime, "sys": usage.ru_stime, "wall": time.monotonic() - _STARTED})
        with open(_LOG, "a") as log:  # one short append per process: lines of concurrent processes do not interleave
            log.write(line + "\\n")

    atexit.register(_write)
'''


_PYTEST_OPTIONS_WITH_VALUES = {"-p", "-k", "-m", "-o", "-c", "-n", "--dist", "--junitxml", "--rootdir", "--basetemp"}


def site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def install(target: Path | None = None) -> None:
    target = target or site_packages()
    (target / f"{HOOK_MODULE}.py").write_text(HOOK_SOURCE)
    (target / HOOK_PTH).write_text(f"import {HOOK_MODULE}\n")
    print(f"installed {HOOK_PTH} in {target}; set CORE_PROCESS_CPU_LOG=<file> to log")


def uninstall(target: Path | None = None) -> None:
    target = target or site_packages()
    for name in (HOOK_PTH, f"{HOOK_MODULE}.py"):
        (target / name).unlink(missing_ok=True)
    print(f"removed the hook from {target}")


def command_of(record: dict[str, object]) -> str:
    """A process's command without its per-run arguments: ``-m module`` or the script's path, else ``-c``."""
    argv = [str(item) for item in record.get("orig_argv") or record.get("argv") or []]  # type: ignore[attr-defined]
    for index, item in enumerate(argv[1:], start=1):
        if item == "-m" and index + 1 < len(argv):
            module = argv[index + 1]
            if module == "pytest":  # pytest runs started by tests (the template's, the kit's): name what they run
                rest = argv[index + 2:]
                paths = [arg for position, arg in enumerate(rest) if not arg.startswith("-")
                         and (position == 0 or rest[position - 1] not in _PYTEST_OPTIONS_WITH_VALUES)]
                return f"-m pytest {paths[0] if paths else ''}".rstrip()
            return f"-m {module}"
        if item == "-c":
            return "-c <code>"
        if not item.startswith("-"):
            return item
    return " ".join(argv) or "<unknown>"


def report(log: Path, top: int) -> None:
    if not log.is_file():
        raise SystemExit(f"{log} does not exist: install the hook, then run with CORE_PROCESS_CPU_LOG={log}")
    cpu: collections.defaultdict[str, float] = collections.defaultdict(float)
    count: collections.Counter[str] = collections.Counter()
    for line in log.read_text().splitlines():
        record = json.loads(line)
        command = command_of(record)
        cpu[command] += float(record["user"]) + float(record["sys"])
        count[command] += 1
    total = sum(cpu.values())
    print(f"{sum(count.values())} Python processes logged, {total:.0f} s of CPU (a lower bound: see the docstring)")
    print(f"{'CPU s':>8} {'share':>6} {'procs':>6} {'s/proc':>7}  command")
    for command, seconds in sorted(cpu.items(), key=lambda item: -item[1])[:top]:
        print(f"{seconds:8.0f} {seconds / total:6.1%} {count[command]:6d} {seconds / count[command]:7.2f}  {command}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/process_cpu.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="action", required=True)
    commands.add_parser("install", help="put the hook in this interpreter's site-packages")
    commands.add_parser("uninstall", help="remove the hook")
    reporting = commands.add_parser("report", help="CPU per command from a log")
    reporting.add_argument("log", type=Path)
    reporting.add_argument("--top", type=int, default=40)
    options = parser.parse_args(argv)
    if options.action == "install":
        install()
    elif options.action == "uninstall":
        uninstall()
    else:
        report(options.log, options.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
