"""The project's errors and the records that cross processes survive pickling: same type, message and attributes.

A rank's failure and a spawned run's outcome travel between processes pickled; an error whose ``__init__`` builds
its message from its parts (``UnknownPluginError(kind, alias, installed)``, ``CollectiveTimeoutError(...)``) could
not be unpickled by Exception's default (``cls(*args)``). Pickling goes by the classes themselves, so their public
paths on the documentation site change nothing here.
"""

from __future__ import annotations

import inspect
import pickle
from datetime import timedelta

import pytest

import core
from core.toolkit import Failure
from core.toolkit.strategies import CollectiveError, CollectiveTimeoutError, PeerLostError, ProcessFailedError

ERRORS = [
    core.UnknownPluginError("strategy", "ddpp", ["ddp", "fsdp"], provider=None),
    core.PluginConflictError("strategy", "ddp", ["core-ddp", "other-ddp"]),
    CollectiveTimeoutError("all_reduce", 0, timedelta(seconds=5), RuntimeError("timed out"), stacks="in sleeps_here"),
    PeerLostError("barrier", 1, RuntimeError("connection reset by peer")),
    ProcessFailedError("rank 1 failed", 1, 3),
    CollectiveError("failed", "all_gather", 0),
    *(getattr(core, name)(f"a {name}") for name in core.__all__
      if inspect.isclass(getattr(core, name)) and issubclass(getattr(core, name), core.CoreError)
      and name not in ("UnknownPluginError", "PluginConflictError")),
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda error: type(error).__name__)
def test_an_error_round_trips_through_pickle(error: core.CoreError) -> None:
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error)
    assert str(back) == str(error) and repr(back) == repr(error)
    assert vars(back) == vars(error)  # global_rank, collective, stacks, installed, ...


def test_the_records_that_cross_processes_round_trip() -> None:
    cluster = core.ClusterInfo(world_size=2, global_rank=1, local_rank=1, node_rank=0, main_address="127.0.0.1",
                               main_port=29500)
    failure = Failure(global_rank=1, local_rank=1, pid=123, exit_code=1, traceback="Traceback ...")
    for record in (cluster, failure):
        assert pickle.loads(pickle.dumps(record)) == record
        assert repr(pickle.loads(pickle.dumps(record))) == repr(record)
