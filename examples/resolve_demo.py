"""Resolve a sample configuration and print the active set it produces."""

from __future__ import annotations

import core


def main() -> None:
    for request in (
        {},
        {"precision": "bf16-true"},
        {"accelerator": "cpu", "devices": 1, "precision": 64},
    ):
        active = core.resolve(**request)
        print(f"resolve({', '.join(f'{k}={v!r}' for k, v in request.items())}):")
        print(active.config.summary())
        print()
    try:
        core.resolve(strategy="dpp")
    except core.CoreError as error:
        print(f"resolve(strategy='dpp') -> {type(error).__name__}: {error}")


if __name__ == "__main__":
    main()
