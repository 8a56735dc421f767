"""The profilers: a base class with Lightning's interface, and the four kinds ``Trainer(profiler=...)`` takes."""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from core._errors import ConfigurationError

__all__ = ["AdvancedProfiler", "PassThroughProfiler", "Profiler", "PyTorchProfiler", "SimpleProfiler", "profiler_from"]

F = TypeVar("F", bound=Callable[..., Any])


class Profiler:
    """Times named actions; subclasses say how (:meth:`start`, :meth:`stop`) and what they report (:meth:`summary`).

    :param dirpath: Where :meth:`describe` writes the report (with ``filename``) and where traces go; ``None``:
        the Trainer's log directory.
    :param filename: Write the report to ``dirpath/<stage>-<filename>[-<global rank>].txt`` (the rank on several
        processes) instead of printing it on global rank 0.
    """

    def __init__(self, dirpath: str | os.PathLike[str] | None = None, filename: str | None = None) -> None:
        self.dirpath = os.fspath(dirpath) if dirpath is not None else None
        self.filename = filename
        self._stage: str | None = None
        self._rank: int | None = None
        self._is_global_zero = True
        self._log_dir: str | None = None

    # -- what subclasses implement --------------------------------------------------------------------

    def start(self, action_name: str) -> None:
        """Begin timing ``action_name``."""

    def stop(self, action_name: str) -> None:
        """End timing ``action_name``."""

    def summary(self) -> str:
        """The report of what was measured since :meth:`setup`."""
        return ""

    # -- the interface the Trainer (and your code) uses -----------------------------------------------

    @contextmanager
    def profile(self, action_name: str) -> Iterator[str]:
        """``with profiler.profile("my action"):`` times the block."""
        self.start(action_name)
        try:
            yield action_name
        finally:
            self.stop(action_name)

    def wrap(self, action_name: str, function: F) -> F:
        """``function`` timed as ``action_name`` on every call (how the Trainer profiles its loop)."""
        start, stop = self.start, self.stop

        def profiled(*args: Any, **kwargs: Any) -> Any:
            start(action_name)
            try:
                return function(*args, **kwargs)
            finally:
                stop(action_name)

        return profiled  # type: ignore[return-value]

    def wrap_iterator(self, action_name: str, iterator: Iterator[Any]) -> Iterator[Any]:
        """``iterator`` with each ``next`` timed as ``action_name`` (the data loader's share of a step), the call
        that finds it exhausted included."""
        while True:
            self.start(action_name)
            try:
                item = next(iterator)
            except StopIteration:
                return
            finally:
                self.stop(action_name)
            yield item

    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | None = None,
              is_global_zero: bool = True) -> None:
        """Called by the Trainer when an entry point starts: ``local_rank`` is the process's global rank on
        several processes (``None`` on one), ``log_dir`` the default ``dirpath``."""
        self._stage = stage
        self._rank = local_rank
        self._log_dir = log_dir
        self._is_global_zero = is_global_zero

    def describe(self) -> None:
        """Print the report on global rank 0, or write it to the file named by ``dirpath`` and ``filename``."""
        report = self.summary()
        if not report:
            return
        if self.filename is None:
            if self._is_global_zero:
                print(report, flush=True)
            return
        path = os.path.join(self._directory(), self._file_name(".txt"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(report)

    def teardown(self, stage: str | None) -> None:
        """Called by the Trainer when an entry point ends, after :meth:`describe`."""
        self._stage = None

    def _directory(self) -> str:
        return self.dirpath or self._log_dir or os.getcwd()

    def _file_name(self, extension: str, base: str | None = None) -> str:
        parts = [part for part in (self._stage, base or self.filename) if part]
        if self._rank is not None:
            parts.append(str(self._rank))
        return "-".join(parts) + extension

    def _title(self) -> str:
        return f"{(self._stage or 'run').upper()} Profiler Report"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(dirpath={self.dirpath!r}, filename={self.filename!r})"


class PassThroughProfiler(Profiler):
    """Records nothing: ``trainer.profiler`` when no profiler is asked for (the loop is then not wrapped at all)."""


class SimpleProfiler(Profiler):
    """Wall time per action: mean duration, number of calls, total time and its share of the whole entry point.

    :param extended: Also report the number of calls and the percentage (Lightning's default).
    """

    def __init__(self, dirpath: str | os.PathLike[str] | None = None, filename: str | None = None,
                 extended: bool = True) -> None:
        super().__init__(dirpath=dirpath, filename=filename)
        self.extended = extended
        self.current_actions: dict[str, float] = {}
        self.recorded_durations: dict[str, list[float]] = defaultdict(list)
        self.start_time = time.monotonic()

    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | None = None,
              is_global_zero: bool = True) -> None:
        super().setup(stage, local_rank, log_dir, is_global_zero)
        self.current_actions.clear()
        self.recorded_durations.clear()
        self.start_time = time.monotonic()

    def start(self, action_name: str) -> None:
        if action_name in self.current_actions:
            raise ConfigurationError(
                f"SimpleProfiler: the action {action_name!r} was started again before it stopped; profile nested "
                f"calls under different names."
            )
        self.current_actions[action_name] = time.monotonic()

    def stop(self, action_name: str) -> None:
        started = self.current_actions.pop(action_name, None)
        if started is None:
            raise ConfigurationError(f"SimpleProfiler: the action {action_name!r} was stopped but never started.")
        self.recorded_durations[action_name].append(time.monotonic() - started)

    def summary(self) -> str:
        total = max(time.monotonic() - self.start_time, 1e-12)
        rows = sorted(((name, len(values), sum(values)) for name, values in self.recorded_durations.items()),
                      key=lambda row: row[2], reverse=True)
        if self.extended:
            header = ["Action", "Mean duration (s)", "Num calls", "Total time (s)", "Percentage %"]
            body = [["Total", "-", str(sum(calls for _, calls, _ in rows)), f"{total:.5g}", "100 %"]]
            body += [[name, f"{spent / calls:.5g}", str(calls), f"{spent:.5g}", f"{100 * spent / total:.3g} %"]
                     for name, calls, spent in rows]
        else:
            header = ["Action", "Mean duration (s)", "Total time (s)"]
            body = [[name, f"{spent / calls:.5g}", f"{spent:.5g}"] for name, calls, spent in rows]
        return f"{self._title()}\n\n{_table(header, body)}"


class AdvancedProfiler(Profiler):
    """``cProfile`` per action: each action's functions by cumulative time.

    Nested actions each have their own ``cProfile.Profile``; Python runs one at a time, so while an inner action
    runs (``training_step`` inside ``run_training_batch``) the outer one records nothing, as in Lightning.

    :param line_count_restriction: How many lines of each action's statistics to show: a number of lines, or a
        fraction (``1.0``: all).
    """

    def __init__(self, dirpath: str | os.PathLike[str] | None = None, filename: str | None = None,
                 line_count_restriction: float = 1.0) -> None:
        super().__init__(dirpath=dirpath, filename=filename)
        self.line_count_restriction = line_count_restriction
        self.profiled_actions: dict[str, cProfile.Profile] = {}
        self._running: list[str] = []

    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | None = None,
              is_global_zero: bool = True) -> None:
        super().setup(stage, local_rank, log_dir, is_global_zero)
        self.profiled_actions.clear()
        self._running.clear()

    def start(self, action_name: str) -> None:
        if self._running:
            self.profiled_actions[self._running[-1]].disable()
        self._running.append(action_name)
        self.profiled_actions.setdefault(action_name, cProfile.Profile()).enable()

    def stop(self, action_name: str) -> None:
        if not self._running or self._running[-1] != action_name:
            raise ConfigurationError(
                f"AdvancedProfiler: stop({action_name!r}) does not match the running action "
                f"{self._running[-1] if self._running else None!r}; actions must nest."
            )
        self.profiled_actions[self._running.pop()].disable()

    def summary(self) -> str:
        sections = []
        for name, profile in self.profiled_actions.items():
            stream = io.StringIO()
            try:
                stats = pstats.Stats(profile, stream=stream)
            except TypeError:  # started but recorded no call
                continue
            stats.strip_dirs().sort_stats("cumulative").print_stats(self.line_count_restriction)
            sections.append(f"Profile stats for: {name}\n{stream.getvalue()}")
        return f"{self._title()}\n\n" + "\n".join(sections) if sections else ""


class PyTorchProfiler(Profiler):
    """``torch.profiler`` over the entry point: operator times by action, and a Chrome trace per process.

    :param group_by_input_shapes: Group the table's rows by input shapes too (records shapes).
    :param export_to_chrome: Write ``<dirpath>/<stage>-<filename or "pytorch">[-<rank>].pt.trace.json``, which
        ``chrome://tracing`` and Perfetto open.
    :param row_limit: Rows of the table (``-1``: all).
    :param sort_by_key: The table's sort key (default ``"cpu_time_total"``).
    :param emit_nvtx: Lightning's NVTX ranges for ``nvprof``: not supported (``False``), on any device; wrap the
        run in ``torch.autograd.profiler.emit_nvtx()`` yourself for them.
    :param record_module_names: Not supported (``False``): each action is already a range in the trace.
    :param profiler_kwargs: Passed to ``torch.profiler.profile`` (``record_shapes``, ``profile_memory``,
        ``with_stack``, ``with_flops``, ``activities``, ...).
    """

    def __init__(
        self,
        dirpath: str | os.PathLike[str] | None = None,
        filename: str | None = None,
        group_by_input_shapes: bool = False,
        emit_nvtx: bool = False,
        export_to_chrome: bool = True,
        row_limit: int = 20,
        sort_by_key: str | None = None,
        record_module_names: bool = False,
        **profiler_kwargs: Any,
    ) -> None:
        super().__init__(dirpath=dirpath, filename=filename)
        if emit_nvtx:
            raise ConfigurationError(
                "PyTorchProfiler(emit_nvtx=True) is not supported: it does not emit NVTX ranges for nvprof, on any "
                "device; drop it to profile with torch.profiler, or wrap the run in "
                "torch.autograd.profiler.emit_nvtx() yourself."
            )
        if record_module_names:
            raise ConfigurationError(
                "PyTorchProfiler(record_module_names=True) is not supported: each Trainer action is a range in the "
                "trace already; pass with_stack=True to see the Python frames (modules' forward) of each operator."
            )
        self.group_by_input_shapes = group_by_input_shapes
        self.export_to_chrome = export_to_chrome
        self.row_limit = row_limit
        self.sort_by_key = sort_by_key or "cpu_time_total"
        self.profiler_kwargs = profiler_kwargs
        if group_by_input_shapes:
            self.profiler_kwargs.setdefault("record_shapes", True)
        self._profiler: Any = None
        self._ranges: dict[str, Any] = {}
        self.trace_path: str | None = None

    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | None = None,
              is_global_zero: bool = True) -> None:
        super().setup(stage, local_rank, log_dir, is_global_zero)
        import torch.profiler

        self._ranges.clear()
        self.trace_path = None
        try:
            self._profiler = torch.profiler.profile(**self.profiler_kwargs)
        except TypeError as error:
            raise ConfigurationError(
                f"PyTorchProfiler({', '.join(f'{key}=...' for key in self.profiler_kwargs)}): torch.profiler.profile "
                f"refused an argument: {error}."
            ) from None
        self._profiler.__enter__()

    def start(self, action_name: str) -> None:
        from torch.autograd.profiler import record_function

        if self._profiler is None or action_name in self._ranges:
            return
        scope = record_function(action_name)
        scope.__enter__()
        self._ranges[action_name] = scope

    def stop(self, action_name: str) -> None:
        scope = self._ranges.pop(action_name, None)
        if scope is not None:
            scope.__exit__(None, None, None)

    def _finish(self) -> None:
        if self._profiler is None:
            return
        for name in list(self._ranges):
            self.stop(name)
        self._profiler.__exit__(None, None, None)
        if self.export_to_chrome:
            directory = self._directory()
            os.makedirs(directory, exist_ok=True)
            self.trace_path = os.path.join(directory, self._file_name(".pt.trace.json", self.filename or "pytorch"))
            self._profiler.export_chrome_trace(self.trace_path)

    def summary(self) -> str:
        self._finish()
        if self._profiler is None:
            return ""
        averages = self._profiler.key_averages(group_by_input_shape=self.group_by_input_shapes)
        table = averages.table(sort_by=self.sort_by_key, row_limit=self.row_limit)
        self._profiler = None
        return f"{self._title()}\n\n{table}"

    def teardown(self, stage: str | None) -> None:
        self._finish()
        self._profiler = None
        super().teardown(stage)


_BY_NAME: dict[str, type[Profiler]] = {"simple": SimpleProfiler, "advanced": AdvancedProfiler,
                                       "pytorch": PyTorchProfiler}


def profiler_from(value: object) -> Profiler | None:
    """``Trainer(profiler=...)``: ``None``, ``"simple"``, ``"advanced"``, ``"pytorch"`` or a :class:`Profiler`."""
    if value is None or isinstance(value, PassThroughProfiler):
        return None
    if isinstance(value, Profiler):
        return value
    if isinstance(value, str) and value in _BY_NAME:
        return _BY_NAME[value]()
    raise ConfigurationError(
        f"Trainer(profiler={value!r}): expected one of {sorted(_BY_NAME)}, a core.profilers.Profiler, or None. "
        f"('xla' is not supported: there is no TPU profiling here.)"
    )


def _table(header: list[str], body: list[list[str]]) -> str:
    widths = [max(len(row[index]) for row in [header, *body]) for index in range(len(header))]

    def line(row: list[str]) -> str:
        return "|  " + "  |  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) + "  |"

    rule = "-" * len(line(header))
    return "\n".join([rule, line(header), rule, *map(line, body), rule])
