"""core.toolkit.abort ends the launching process even when its report cannot be written.

A job whose output pipe lost its reader (the shell pipeline or the harness that read it went away) once hung for
ever: the monitor thread claimed the failure, its report raised BrokenPipeError before ``os._exit``, and the main
thread waited to be killed by a monitor that no longer existed. Real processes: a launcher script, a worker that
fails, a stderr pipe closed by its reader.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

LAUNCHER = textwrap.dedent(
    """
    import os, sys, tempfile, time
    from core.toolkit import Supervisor, abort, start_worker

    scratch = tempfile.mkdtemp(dir=sys.argv[1])
    worker = start_worker([sys.executable, "-c", "import sys; sys.exit(3)"], dict(os.environ), 1, 1,
                          os.path.join(scratch, "rank-1.json"))
    supervisor = Supervisor([worker], prefix="probe", scratch=scratch)
    supervisor.watch(lambda found: abort(supervisor, found))
    while True:  # as RankLauncher's main thread does once the monitor claimed the failure
        time.sleep(1)
    """
)


@pytest.mark.timeout(120)
def test_a_failed_job_whose_stderr_reader_is_gone_exits_instead_of_hanging(tmp_path: Path) -> None:
    script = tmp_path / "launcher.py"
    script.write_text(LAUNCHER)
    process = subprocess.Popen([sys.executable, str(script), str(tmp_path)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    assert process.stderr is not None
    process.stderr.close()  # the reader goes away: every write to stderr now fails with EPIPE
    try:
        code = process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        pytest.fail("the launcher hung after its worker failed: the monitor died writing the report")
    assert code == 1
    assert not any(path.is_dir() for path in tmp_path.iterdir())  # abort removed the workers' error directory
