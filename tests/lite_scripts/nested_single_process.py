"""Rank 0 of a 2-process ddp run builds a second, single-process Lite (as litgpt's merge_lora does) and uses it."""

import sys

import torch

import core


def main(lite: core.Lite) -> None:
    if lite.global_rank == 0:
        inner = core.Lite(devices=1, accelerator="cpu")
        module = inner.setup(torch.nn.Linear(2, 2))
        inner.print(f"inner world_size={inner.world_size} rank={inner.global_rank} device={inner.device} "
                    f"out={tuple(module(torch.ones(1, 2)).shape)}")
    lite.barrier()
    # One write per line: both ranks share the pipe, and under PYTHONUNBUFFERED (as on the CI machine) print() writes
    # its text and its newline separately, so the two ranks' lines could interleave into one line and an empty one.
    sys.stdout.write(f"outer rank={lite.global_rank} world_size={lite.world_size}\n")
    sys.stdout.flush()


if __name__ == "__main__":
    core.Lite(accelerator="cpu", strategy="ddp", devices=2).launch(main)
