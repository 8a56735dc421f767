"""core-ray without a cluster: listing, --check, options, and the ``ray_worker`` environment under the kit."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import ClassVar

import pytest
from core_ray import RANK_VARIABLES, RayLauncher, RayRank, read_rank

import core
from core.testing import EnvironmentConformance

RANK = RayRank(global_rank=3, world_size=4, local_rank=1, local_world_size=2, node_rank=1,
               main_address="127.0.0.1", main_port=29123)


def test_listing_shows_both_plugins_without_importing_torch_or_ray() -> None:
    code = ("import sys; from core.plugins import main; main([]); "
            "print('imported:', sorted(m for m in ('torch', 'ray', 'core_ray') if m in sys.modules))")
    finished = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    rows = sorted(line.split()[:2] for line in finished.stdout.splitlines() if "core-ray" in line)
    assert rows == [["environment", "ray_worker"], ["extension", "ray"]]
    assert "imported: []" in finished.stdout


def test_check_says_why_ray_is_unusable_when_it_is_missing_and_how_to_install_it() -> None:
    # The reason in full from --json: the table shortens long reasons below it (--check keeps 100 columns).
    code = "import sys; sys.modules['ray'] = None; from core.plugins import main; main(['--check', '--json'])"
    finished = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    rows = json.loads(finished.stdout)["plugins"]
    row = next(row for row in rows if (row["kind"], row["alias"]) == ("extension", "ray"))
    assert row["check"] == "unavailable"
    assert "Ray is not importable" in row["check_reason"]
    assert "install it: pip install 'ray>=2.9'" in row["check_reason"]


def test_a_run_with_ray_missing_fails_at_launch_naming_the_fix() -> None:
    code = ("import sys; sys.modules['ray'] = None\n"
            "from core import Lite\n"
            "Lite(accelerator='cpu', strategy='ddp', devices=2, plugins=['ray']).launch(print)\n")
    finished = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert finished.returncode != 0
    assert "PluginUnavailableError: plugins=['ray'] cannot run: Ray is not importable" in finished.stderr
    assert "pip install 'ray>=2.9'" in finished.stderr


def test_options_are_checked_when_the_launcher_is_built() -> None:
    with pytest.raises(core.ConfigurationError, match=r"node_placement='EVERYWHERE'\) is not a Ray placement"):
        RayLauncher(node_placement="EVERYWHERE")
    with pytest.raises(core.ConfigurationError, match=r"num_cpus_per_worker=-1\): expected a number >= 0"):
        RayLauncher(num_cpus_per_worker=-1)
    with pytest.raises(core.ConfigurationError, match=r"placement_timeout=0\): expected a number > 0"):
        RayLauncher(placement_timeout=0)


def test_the_rank_variables_are_read_back_and_a_malformed_one_is_named() -> None:
    variables = RANK.variables()
    assert set(RANK_VARIABLES) <= set(variables)
    assert read_rank(variables) == RANK
    assert (variables["RANK"], variables["LOCAL_RANK"], variables["WORLD_SIZE"]) == ("3", "1", "4")
    with pytest.raises(core.ConfigurationError, match="CORE_RAY_WORLD_SIZE='four' is not a whole number"):
        read_rank({**variables, "CORE_RAY_WORLD_SIZE": "four"})


def test_the_launcher_pickles_without_its_run() -> None:
    import pickle

    launcher = RayLauncher(address="127.0.0.1:1", num_cpus_per_worker=2)
    launcher.core_attach(object())  # type: ignore[arg-type]  # any active set: it must stay behind
    copy = pickle.loads(pickle.dumps(launcher))
    assert (copy.address, copy.num_cpus_per_worker, copy._active) == ("127.0.0.1:1", 2.0, None)


class TestRayWorkerEnvironment(EnvironmentConformance):
    """The environment of a rank inside its actor: 2 nodes x 2 actors, this one global rank 3."""

    alias = "ray_worker"
    variables: ClassVar[dict[str, str]] = RANK.variables()
    devices_per_node = 2
    num_nodes = 2
    expected_cluster = core.ClusterInfo(world_size=4, global_rank=3, local_rank=1, node_rank=1,
                                        main_address="127.0.0.1", main_port=29123)
    mismatched_layout = (1, 2)
