"""One hivemind peer, started by tests/hivemind_harness.py: ``python peer.py CONFIG.json``.

The config names the peer, its data seed, the hivemind epochs to reach and the files it coordinates through
(all in ``out``): ``ready-<name>`` after set-up, then (``barrier``: that many peers) the start barrier;
``progress-<name>.json`` after every step; ``result-<name>.json`` at the end; with ``hold``, the peer keeps
its DHT up (serving its state to joiners) until the file ``release`` appears.
"""

import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
from core_hivemind import HivemindStrategy

from core import Lite

WAIT_LIMIT = 120.0  # seconds a peer waits for the others before it gives up (the test fails then)


def wait_for(paths: list[Path], what: str) -> None:
    deadline = time.monotonic() + WAIT_LIMIT
    while not all(path.exists() for path in paths):
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up waiting for {what}: {[str(path) for path in paths if not path.exists()]}")
        time.sleep(0.05)


def see_peers(collaborative: Any, count: int) -> None:
    """Wait until hivemind's progress tracker sees ``count`` peers (itself included) in the DHT."""
    deadline = time.monotonic() + WAIT_LIMIT
    while collaborative.tracker.global_progress.num_peers < count:
        if time.monotonic() > deadline:
            raise SystemExit(f"the tracker saw {collaborative.tracker.global_progress.num_peers} of {count} peers")
        time.sleep(0.05)


def parameters(model: torch.nn.Module) -> dict[str, list[float]]:
    return {name: tensor.detach().flatten().tolist() for name, tensor in model.state_dict().items()}


def write(path: Path, payload: dict[str, Any]) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(payload))
    partial.replace(path)  # readers never see half a file


def main(lite: Lite, config: dict[str, Any]) -> None:
    out, name = Path(config["out"]), config["name"]
    torch.manual_seed(config.get("init_seed", 0))  # the same initial weights on every peer unless told otherwise
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    initial = parameters(model)
    model, optimizer = lite.setup(model, torch.optim.SGD(model.parameters(), lr=0.05))
    collaborative = optimizer.optimizer  # the hivemind.Optimizer the strategy made
    joined = {"epoch": collaborative.local_epoch, "parameters": parameters(model)}
    (out / f"ready-{name}").touch()
    if config.get("barrier"):
        wait_for([out / f"ready-{peer}" for peer in config["barrier"]], "the start barrier")

    generator = torch.Generator().manual_seed(config["data_seed"])
    teacher = torch.randn(16, 1, generator=torch.Generator().manual_seed(1))
    steps, losses = 0, []
    while collaborative.local_epoch < config["epochs"]:
        inputs = torch.randn(config["batch_size"], 16, generator=generator)
        loss = torch.nn.functional.mse_loss(model(inputs), inputs @ teacher)
        lite.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        steps += 1
        time.sleep(config.get("step_seconds", 0.0))  # a step as long as a real one: see test_hivemind_peers.py
        if steps == 1 and config.get("barrier"):  # a peer is visible to the others once it reported samples
            see_peers(collaborative, len(config["barrier"]))
        losses.append(loss.item())
        write(out / f"progress-{name}.json", {"epoch": collaborative.local_epoch, "steps": steps})
    result = {
        "initial": initial, "joined": joined, "epoch": collaborative.local_epoch, "steps": steps,
        "losses": losses, "parameters": parameters(model),
    }
    write(out / f"result-{name}.json", result)
    if config.get("hold"):
        wait_for([out / "release"], "the release")


if __name__ == "__main__":
    config = json.loads(Path(sys.argv[1]).read_text())
    strategy = HivemindStrategy(
        target_batch_size=config["target_batch_size"],
        batch_size=config["batch_size"],
        run_id=config["run_id"],
        matchmaking_time=config["matchmaking_time"],
        averaging_timeout=config["averaging_timeout"],
        delay_state_averaging=False,
        verbose=config.get("verbose", False),
        averager_opts=config.get("averager_opts"),
        next_chunk_timeout=config.get("next_chunk_timeout"),  # through to hivemind.Optimizer (None: its default)
    )
    Lite(accelerator="cpu", strategy=strategy).launch(main, config)
