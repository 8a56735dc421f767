"""core-powersgd: compress DDP's gradient all-reduce with PowerSGD, fp16, or both.

An extension (``plugins=["powersgd"]``, or ``plugins=[PowerSGDExtension(rank=4)]`` for options) that wraps
the ``strategy_configure_ddp`` hook of whatever DDP-family strategy is active and registers one of torch's
communication hooks on the ``DistributedDataParallel`` module it returns. It works with ``ddp``,
``ddp_spawn``, ``ddp_fork`` and any third-party strategy that implements that hook, without subclassing any.
"""

from ._extension import PowerSGDExtension

__all__ = ["PowerSGDExtension"]
