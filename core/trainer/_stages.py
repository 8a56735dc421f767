"""The evaluation loops by their literal names: hooks, step method, data method and flags of each.

The validation, test and predict loops run the same code (``core.trainer._eval``); what differs is which
hooks, step and ``*_dataloader`` method they call and which flags they read. Each loop's names are written out
here once, in full, so that grepping ``on_test_start`` or ``limit_predict_batches`` finds the one place that
says where it is called, instead of a name assembled from pieces at run time.
"""

from __future__ import annotations

from typing import Final

import attrs


@attrs.frozen
class EvalLoop:
    """The names one evaluation loop uses.

    :param name: The loop, as in Lightning's ``on_<name>_start`` (``"validation"``, ``"test"``, ``"predict"``).
    :param data: Its key among a run's loaders, and its word in messages (``"val"``, ``"test"``, ``"predict"``).
    :param step: The Module's step method.
    :param dataloader: The DataModule's / Module's data method.
    :param limit_flag: The Trainer flag limiting its batches.
    :param batch_counts: The Trainer attribute holding its number of batches per loader.
    :param start: The callbacks' and the Module's hook before the loop (``end``, ``epoch_start`` ... likewise).
    :param model_eval: The Module's hook that puts the model in eval mode, called only when overridden.
    :param model_train: Its counterpart after the loop; ``None``: the predict loop has none (as in Lightning).
    :param profiled_next: The profiler's action name for fetching a batch (Lightning's).
    """

    name: str
    data: str
    step: str
    dataloader: str
    limit_flag: str
    batch_counts: str
    start: str
    end: str
    epoch_start: str
    epoch_end: str
    batch_start: str
    batch_end: str
    model_eval: str
    model_train: str | None
    profiled_next: str


VALIDATION: Final = EvalLoop(
    name="validation",
    data="val",
    step="validation_step",
    dataloader="val_dataloader",
    limit_flag="limit_val_batches",
    batch_counts="num_val_batches",
    start="on_validation_start",
    end="on_validation_end",
    epoch_start="on_validation_epoch_start",
    epoch_end="on_validation_epoch_end",
    batch_start="on_validation_batch_start",
    batch_end="on_validation_batch_end",
    model_eval="on_validation_model_eval",
    model_train="on_validation_model_train",
    profiled_next="[_EvaluationLoop].val_next",
)

TEST: Final = EvalLoop(
    name="test",
    data="test",
    step="test_step",
    dataloader="test_dataloader",
    limit_flag="limit_test_batches",
    batch_counts="num_test_batches",
    start="on_test_start",
    end="on_test_end",
    epoch_start="on_test_epoch_start",
    epoch_end="on_test_epoch_end",
    batch_start="on_test_batch_start",
    batch_end="on_test_batch_end",
    model_eval="on_test_model_eval",
    model_train="on_test_model_train",
    profiled_next="[_EvaluationLoop].test_next",
)

PREDICT: Final = EvalLoop(
    name="predict",
    data="predict",
    step="predict_step",
    dataloader="predict_dataloader",
    limit_flag="limit_predict_batches",
    batch_counts="num_predict_batches",
    start="on_predict_start",
    end="on_predict_end",
    epoch_start="on_predict_epoch_start",
    epoch_end="on_predict_epoch_end",
    batch_start="on_predict_batch_start",
    batch_end="on_predict_batch_end",
    model_eval="on_predict_model_eval",
    model_train=None,
    profiled_next="[_PredictionLoop].predict_next",
)

EVAL_LOOP_OF_STAGE: Final[dict[str, EvalLoop]] = {
    "fit": VALIDATION, "validate": VALIDATION, "test": TEST, "predict": PREDICT,
}
"""The evaluation loop each entry point sets up data for (fit: its validation)."""
