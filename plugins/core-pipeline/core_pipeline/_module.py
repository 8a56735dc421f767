"""What ``Lite.setup`` wraps under ``pipeline``: calling it runs the schedule over this rank's stages.

``model(inputs, target=targets)`` in training mode is one training step of the whole pipeline: the batch is cut into
micro-batches, every rank runs the forward and backward passes of its stages in the schedule's order, and the
gradients are in ``.grad`` when the call returns. It returns the batch's loss (the mean over micro-batches, as one
process computing ``loss_fn`` on the whole batch would get), sent from the last stage to every rank of the pipeline.
``lite.backward(loss)`` then has nothing left to do.

In evaluation mode (``model.eval()`` or under ``torch.no_grad()``) the call runs forward only: with ``target`` it
returns the loss, without it the last stage's output, on every rank of the pipeline.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining.schedules import PipelineScheduleMulti, PipelineScheduleSingle

from core import ConfigurationError


class PipelineModule(nn.Module):
    """This rank's stages and the schedules that drive them.

    :param stages: This rank's stage modules, in stage order.
    :param model: The user's model, pruned to this rank's stages: what ``state_dict`` reads.
    :param schedule: The training schedule (forward and backward, with the loss function).
    :param forward_only: A schedule without loss, for outputs in evaluation mode.
    :param data_parallel_group: The ranks holding the same stages in the other copies of the pipeline (``None``: one
        copy). After each training step the gradients are averaged over it, unless :attr:`sync_gradients` is off.
    """

    def __init__(
        self,
        stages: list[nn.Module],
        model: nn.Module,
        schedule: PipelineScheduleSingle | PipelineScheduleMulti,
        forward_only: PipelineScheduleSingle | PipelineScheduleMulti,
        n_microbatches: int,
        holds_first: bool,
        holds_last: bool,
        pipeline_group: dist.ProcessGroup,
        last_rank: int,
        data_parallel_group: dist.ProcessGroup | None,
    ) -> None:
        super().__init__()
        self.stages = nn.ModuleList(stages)
        self.__dict__["model"] = model  # not registered: its parameters are the stages' already
        self._schedule = schedule
        self._forward_only = forward_only
        self._n_microbatches = n_microbatches
        self._holds_first = holds_first
        self._holds_last = holds_last
        self._group = pipeline_group
        self._last_rank = last_rank
        self._data_parallel_group = data_parallel_group
        self.sync_gradients = True
        self.last_loss: torch.Tensor | None = None

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        return self.__dict__["model"].state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        return self.__dict__["model"].load_state_dict(state_dict, strict=strict, assign=assign)

    def forward(self, *inputs: Any, target: torch.Tensor | None = None) -> Any:
        self._check_batch(inputs, target)
        arguments = inputs if self._holds_first else ()
        training = self.training and torch.is_grad_enabled()
        if training and target is None:
            raise ConfigurationError(
                "Under the pipeline strategy a training step is model(inputs, target=targets): the last stage computes "
                "the loss with the strategy's loss_fn. Pass target=, or call model.eval() for outputs only."
            )
        if target is None:
            output = self._forward_only.step(*arguments)
            return self._from_last_stage(output)
        losses: list[torch.Tensor] = []
        keywords: dict[str, Any] = {"target": target, "losses": losses} if self._holds_last else {}
        if training:
            self._schedule.step(*arguments, return_outputs=False, **keywords)
            if self._data_parallel_group is not None and self.sync_gradients:
                self._average_gradients(self._data_parallel_group)
        else:
            self._schedule.eval(*arguments, return_outputs=False, **keywords)
        loss = torch.stack(losses).mean().detach() if self._holds_last else None
        self.last_loss = self._from_last_stage(loss)
        return self.last_loss

    def _check_batch(self, inputs: tuple[Any, ...], target: torch.Tensor | None) -> None:
        tensors = [value for value in (*inputs, target) if isinstance(value, torch.Tensor)]
        if not tensors:
            raise ConfigurationError("The pipeline takes the batch's tensors: model(inputs, target=targets).")
        size = tensors[0].shape[0]
        if size % self._n_microbatches:
            raise ConfigurationError(
                f"A batch of {size} samples cannot be cut into n_microbatches={self._n_microbatches} equal "
                f"micro-batches (the loss would no longer be the batch's mean). Use a batch size divisible by "
                f"{self._n_microbatches} (DataLoader(drop_last=True) drops a short last batch), or change "
                f"PipelineStrategy(n_microbatches=...)."
            )

    def _average_gradients(self, group: dist.ProcessGroup) -> None:
        """The mean of every gradient over the copies of this rank's stages, in one all-reduce per dtype."""
        gradients = [parameter.grad for parameter in self.stages.parameters() if parameter.grad is not None]
        for dtype in dict.fromkeys(gradient.dtype for gradient in gradients):
            same = [gradient for gradient in gradients if gradient.dtype == dtype]
            flat = torch.cat([gradient.reshape(-1) for gradient in same])
            dist.all_reduce(flat, group=group)
            flat /= dist.get_world_size(group)
            offset = 0
            for gradient in same:
                gradient.copy_(flat[offset:offset + gradient.numel()].view_as(gradient))
                offset += gradient.numel()

    def _from_last_stage(self, value: Any) -> Any:
        """``value`` as the last stage holds it, on every rank of this pipeline."""
        holder = [value]
        dist.broadcast_object_list(holder, src=self._last_rank, group=self._group)
        return holder[0]


class PipelineStepModule(nn.Module):
    """What the pipeline returns for a :class:`core.toolkit.strategies.StepRunner` (the Trainer's ``StepModule``):
    steps that call the pipeline.

    The Trainer calls the set-up module with a batch to run ``training_step`` (``validation_step``, ...). During
    that call the Module's own ``self(...)`` goes to the pipeline: ``loss = self(inputs, target=targets)`` in
    ``training_step`` runs the schedule (forward and backward of every micro-batch) and returns the batch's loss on
    every rank; ``self(inputs)`` in evaluation returns the last stage's output. Calling the Module's submodules
    directly bypasses the pipeline and sees only this rank's stages.

    :param step_module: The Trainer's step runner (its ``stepped_module`` is the user's Module, pruned to this rank's
        stages).
    :param pipeline: The pipeline over this rank's stages, registered so that ``parameters()``, ``train()`` and
        ``eval()`` reach the stages.
    """

    def __init__(self, step_module: nn.Module, pipeline: PipelineModule) -> None:
        super().__init__()
        self.pipeline = pipeline
        self.__dict__["step_module"] = step_module

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        return self.pipeline.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        return self.pipeline.load_state_dict(state_dict, strict=strict, assign=assign)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        step_module = self.__dict__["step_module"]
        model = step_module.stepped_module
        model.__dict__["forward"] = self.pipeline  # the Module's __call__ finds the instance attribute first
        try:
            return step_module(*args, **kwargs)
        finally:
            del model.__dict__["forward"]
