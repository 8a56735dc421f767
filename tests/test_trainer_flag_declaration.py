"""Each Trainer flag is declared once (``core.trainer._flags.FLAGS``), and every place that names the flags follows
from that declaration: ``Trainer.__init__``'s signature, the ``TrainerConfig`` record and the Trainer's read-only
views are written by ``scripts/gen_trainer_flags.py`` (checked in; regenerating changes nothing),
docs/trainer-flags.md's table too, ``help(Trainer)`` at import, and Lightning's ``Trainer`` takes them all. A flag
added in one of these places by hand only fails here."""

from __future__ import annotations

import inspect
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

import core
import core.lightning
import core.lightning.pytorch
from core.trainer import Trainer, TrainerConfig
from core.trainer._flags import FLAGS, FlagView, flags_of

ROOT = Path(__file__).resolve().parents[1]


def signature_mismatches(function: Callable[..., Any]) -> list[str]:
    """What differs between ``function``'s parameters (after ``self``) and :data:`FLAGS`: names, order, defaults
    and annotations, each difference named."""
    parameters = list(inspect.signature(function).parameters.values())[1:]
    found = [(p.name, p.default, p.annotation) for p in parameters]
    declared = [(flag.name, flag.default, flag.type) for flag in FLAGS]
    names, declared_names = [name for name, _, _ in found], [flag.name for flag in FLAGS]
    problems = [f"not declared in FLAGS: {name}" for name in names if name not in declared_names]
    problems += [f"declared but not a parameter: {name}" for name in declared_names if name not in names]
    if not problems:
        problems += [f"{have} != declared {want}" for have, want in zip(found, declared, strict=True) if have != want]
    return problems


def test_the_trainer_signature_is_the_declaration() -> None:
    assert signature_mismatches(Trainer.__init__) == []
    parameters = list(inspect.signature(Trainer.__init__).parameters.values())[1:]
    assert {parameter.kind for parameter in parameters} == {inspect.Parameter.POSITIONAL_OR_KEYWORD}


def test_a_flag_added_to_the_signature_only_or_declared_differently_is_caught() -> None:
    def with_an_extra_flag(self: object, *args: Any, **kwargs: Any) -> None: ...

    parameters = list(inspect.signature(Trainer.__init__).parameters.values())
    extra = inspect.Parameter("max_joy", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=1, annotation="int")
    with_an_extra_flag.__signature__ = inspect.Signature([*parameters, extra])  # type: ignore[attr-defined]
    assert signature_mismatches(with_an_extra_flag) == ["not declared in FLAGS: max_joy"]

    def with_another_default(self: object, *args: Any, **kwargs: Any) -> None: ...

    changed = [p.replace(default=7) if p.name == "log_every_n_steps" else p for p in parameters]
    with_another_default.__signature__ = inspect.Signature(changed)  # type: ignore[attr-defined]
    assert signature_mismatches(with_another_default) == [
        "('log_every_n_steps', 7, 'int | None') != declared ('log_every_n_steps', None, 'int | None')"
    ]


def test_the_config_record_holds_exactly_the_loop_flags_in_order() -> None:
    assert [field.name for field in attrs.fields(TrainerConfig)] == [flag.name for flag in flags_of("loop")]
    assert all(flag.check is not None for flag in flags_of("loop"))  # every loop flag is checked into the record
    assert all(flag.check is None for flag in FLAGS if flag.group != "loop")


def test_each_loop_flag_is_a_read_only_view_of_the_record(tmp_path: Path) -> None:
    trainer = Trainer(accelerator="cpu", devices=1, logger=False, default_root_dir=tmp_path, max_steps=7,
                      limit_test_batches=3, gradient_clip_val=0.5, log_every_n_steps=5, overfit_batches=2)
    for flag in flags_of("loop"):
        view = inspect.getattr_static(Trainer, flag.name)
        assert isinstance(view, property if flag.own_property else FlagView), flag.name
        assert getattr(trainer, flag.name) == getattr(trainer.config, flag.name), flag.name
    assert (trainer.max_steps, trainer.limit_test_batches, trainer.limit_train_batches) == (7, 3, 2)
    assert Trainer.max_steps.__doc__ == "stop after this many optimizer steps (`-1`: no limit)"  # help() shows it
    with pytest.raises(AttributeError, match=r"trainer.max_steps is read-only: pass it when constructing the "
                                             r"Trainer \(Trainer\(max_steps=...\)\)"):
        trainer.max_steps = 3  # type: ignore[assignment]  # mypy refuses it too: the view's __set__ takes Never
    assert trainer.max_steps == 7


def test_from_flags_takes_the_loop_flags_only() -> None:
    with pytest.raises(TypeError, match=r"not the Trainer's loop flags: \['logger', 'max_joy'\]"):
        TrainerConfig.from_flags(logger=False, max_joy=1)


def test_the_lite_flags_reach_lite_as_given(tmp_path: Path) -> None:
    trainer = Trainer(accelerator="cpu", devices=1, precision="32-true", default_root_dir=tmp_path, logger=False)
    assert list(trainer.lite_settings) == [flag.name for flag in flags_of("lite")]
    assert trainer.lite_settings["precision"] == "32-true"


def test_the_lite_flags_are_declared_as_lite_declares_them() -> None:
    # The Trainer's signature repeats Lite's parameters it hands on: same names, order, annotations and defaults.
    parameters = list(inspect.signature(core.Lite.__init__).parameters.values())[1:]
    lite = [(p.name, p.annotation, p.default) for p in parameters if p.name in {f.name for f in flags_of("lite")}]
    assert lite == [(flag.name, flag.type, flag.default) for flag in flags_of("lite")]


def test_regenerating_the_signature_record_views_and_docs_table_changes_nothing() -> None:
    script = ROOT / "scripts" / "gen_trainer_flags.py"
    checked = subprocess.run([sys.executable, str(script), "--check"], timeout=120, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr  # names each stale file and `make flags`
    committed = (ROOT / "docs" / "trainer-flags.md").read_text()
    rows = [line for line in committed.splitlines() if line.startswith("| `")]
    for flag in FLAGS:
        assert any(row.startswith(f"| `{flag.name}` | ") and flag.doc in row for row in rows), flag.name


def test_the_check_names_a_hand_edited_generated_file_and_the_command(tmp_path: Path) -> None:
    # The script run on a copy of the repository's generated files, one of them edited by hand.
    for path in ("scripts/gen_trainer_flags.py", "core/trainer/_trainer.py", "core/trainer/_config.py",
                 "docs/trainer-flags.md"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text((ROOT / path).read_text())
    config = tmp_path / "core" / "trainer" / "_config.py"
    config.write_text(config.read_text().replace("    max_steps: int\n", "    max_steps: int\n    max_joy: int\n"))
    checked = subprocess.run([sys.executable, str(tmp_path / "scripts" / "gen_trainer_flags.py"), "--check"],
                             timeout=120, capture_output=True, text=True)
    assert (checked.returncode, checked.stdout) == (1, (
        "core/trainer/_config.py is not what the flag declarations give: run `make flags` "
        "(scripts/gen_trainer_flags.py)\n"))
    rewritten = subprocess.run([sys.executable, str(tmp_path / "scripts" / "gen_trainer_flags.py")],
                               timeout=120, capture_output=True, text=True, check=True)
    assert rewritten.stdout == "wrote core/trainer/_config.py\n"
    assert config.read_text() == (ROOT / "core" / "trainer" / "_config.py").read_text()


def test_help_lists_every_flag_with_its_line() -> None:
    doc = Trainer.__doc__ or ""
    for flag in FLAGS:
        assert f":param {flag.name}: {flag.doc}" in doc


def test_lightning_trainer_takes_the_trainers_flags_so_they_are_the_declaration() -> None:
    # core.lightning's Trainer is core's with Lightning's default logger and layout (core/lightning/_trainer.py): it
    # declares no flag of its own and passes every one, by position or name, to core's __init__.
    assert core.lightning.Trainer is core.lightning.pytorch.Trainer
    assert issubclass(core.lightning.Trainer, Trainer) and core.Trainer is Trainer
    # Only the documented read-backs (trainer.strategy is the strategy object, as Lightning's) shadow a flag's value
    from core.lightning._trainer import LIGHTNING_READS

    shadowed = {flag.name for flag in FLAGS} & set(vars(core.lightning.Trainer))
    assert shadowed == LIGHTNING_READS, "a flag redeclared by Lightning's"
    positional = [flag.default for flag in FLAGS]  # every flag by position, as Lightning's signature orders them
    lightning, native = core.lightning.Trainer(*positional), Trainer(*positional)

    def plain(trainer: Trainer) -> dict[str, Any]:
        values = {flag.name: getattr(trainer.config, flag.name, None) for flag in FLAGS}
        return {name: value for name, value in values.items() if isinstance(value, (str, int, float, type(None)))}

    assert plain(lightning) == plain(native) and len(plain(native)) > 10
