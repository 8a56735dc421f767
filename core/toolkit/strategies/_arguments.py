"""Arguments a strategy does not take but another framework's strategy of the same name does (Lightning's).

A Lightning program that passes ``FSDPStrategy(limit_all_gathers=True)`` or ``DDPStrategy(accelerator=...)`` must
not meet a bare ``TypeError``: each such name is either taken with a one-time note saying why it changes nothing
here, or refused with a :class:`core.ConfigurationError` saying why and what to write instead. A strategy class
declares both as data (:attr:`ParallelStrategy.refused_arguments`, :attr:`ParallelStrategy.ignored_arguments`); an
argument in neither is refused with the names the class does take.
"""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Collection, Mapping
from typing import Any, Final

from core._errors import ConfigurationError, CoreWarning

RUN_ARGUMENTS: Final[Mapping[str, str]] = {
    "accelerator": "the accelerator is chosen for the whole run: Lite(accelerator=...) or Trainer(accelerator=...)",
    "parallel_devices": "the devices are chosen for the whole run: Lite(devices=...) or Trainer(devices=...)",
    "cluster_environment": "the cluster environment is a plugin of the run, detected or named: plugins=['slurm']",
    "checkpoint_io": "the checkpoint_io is a plugin of the run: plugins=['distributed'] (or 'torch', 'async')",
    "precision": "the precision is chosen for the whole run: Lite(precision='bf16-mixed') or Trainer(precision=...)",
    "precision_plugin": "the precision is chosen for the whole run: Trainer(precision='bf16-mixed')",
}
"""Lightning strategy arguments that name a part of the run which ``core`` selects on Lite / the Trainer."""

_NOTED: set[tuple[str, str]] = set()


class IgnoredArgumentWarning(CoreWarning):
    """A strategy took an argument (another framework's) that has no effect here; the message says why."""


def take_other_arguments(
    owner: str,
    given: Mapping[str, Any],
    *,
    refused: Mapping[str, str],
    ignored: Mapping[str, str],
    takes: Collection[str],
) -> None:
    """Note each of ``given`` that is in ``ignored`` (once per process and name); refuse the rest in one error.

    :param owner: The class, as the user wrote it (``"FSDPStrategy"``).
    :param given: The keyword arguments the class's own parameters did not take.
    :param refused: Names refused, each with why and what to do instead.
    :param ignored: Names accepted with no effect, each with why.
    :param takes: The names the class does take, for "did you mean".
    :raises core.ConfigurationError: naming every refused or unknown argument.
    """
    problems = []
    for name in given:
        if name in ignored:
            if (owner, name) not in _NOTED:
                _NOTED.add((owner, name))
                warnings.warn(f"{owner}({name}=...) has no effect here: {ignored[name]}.", IgnoredArgumentWarning,
                              stacklevel=4)
        elif name in refused:
            problems.append(f"{name}: {refused[name]}")
        else:
            close = difflib.get_close_matches(name, list(takes), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            problems.append(f"{name}: not an argument of {owner}; {hint}it takes {sorted(takes)}")
    if problems:
        raise ConfigurationError(f"{owner} does not take " + "; ".join(problems) + ".")
