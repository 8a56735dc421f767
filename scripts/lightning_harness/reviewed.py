"""The reviewed lists of scripts/lightning_tests.py (test id without parameters -> reason).

``NOT_APPLICABLE``: tests whose own code reaches into Lightning's internals: its loop and connector objects
(``trainer.fit_loop``, ``trainer._checkpoint_connector``, ``trainer.strategy.connect``), private attributes and
functions (``fabric._strategy``, ``_FabricModule``, ``_replace_dunder_methods``), mocks of its device detection,
patches of names inside its modules (``lightning.fabric.utilities.data.os``). A different implementation cannot
pass them whatever it does, so they are left out of the fair-test count. Each entry was read against the test;
a test of public behaviour that fails is never here. For a new Lightning version,
``python scripts/lightning_tests.py --lightning-src ... --suggest`` writes candidates to review.

``KEPT``: tests of public behaviour where core differs on purpose. They stay in the count, as failures, and
docs/migrating-from-lightning.md says why.
"""

_CHECKED_FILES = (
    "mocks torch.save with an object that writes nothing; core checks every checkpoint file it writes and refuses "
    "one it cannot read back (docs/migrating-from-lightning.md, 'Differences from Lightning')"
)

_FABRIC_STRATEGY_MOCKS = (
    "replaces a method of Lightning's Strategy object (load_checkpoint, clip_gradients_norm/value, "
    "checkpoint_io.save_checkpoint) with a mock and expects Fabric to call it; lite.strategy is core's strategy "
    "plugin, which Lite reaches through hooks (docs/migrating-from-lightning.md, 'Lite (Fabric)')"
)
_FABRIC_CLI = (
    "sets LT_CLI_USED, the marker of Lightning's `fabric run` command, which core does not have; under core-run "
    "launch() sets the process up (docs/migrating-from-lightning.md, 'Lite (Fabric)')"
)

_FIT_ORDER = (
    "expects the loaders after on_fit_start and the gradients zeroed between training_step and backward; core asks "
    "for the loaders before configure_optimizers and zeroes before training_step (docs/migrating-from-lightning.md, "
    "'When fit asks for the loaders', 'When the gradients are zeroed')"
)

KEPT: dict[str, str] = {
    "tests_fabric/test_fabric.py::test_load_raw": _FABRIC_STRATEGY_MOCKS,
    "tests_fabric/test_fabric.py::test_fabric_load_forwards_weights_only_to_strategy": _FABRIC_STRATEGY_MOCKS,
    "tests_fabric/test_fabric.py::test_fabric_load_raw_forwards_weights_only_to_strategy": _FABRIC_STRATEGY_MOCKS,
    "tests_fabric/test_fabric.py::test_grad_clipping": _FABRIC_STRATEGY_MOCKS,
    "tests_fabric/test_fabric.py::test_save_filter": _FABRIC_STRATEGY_MOCKS + (
        "; also a filter for a plain value (an int) is refused, where Fabric saves the value whole"
    ),
    "tests_fabric/test_fabric.py::test_launch_and_cli_not_allowed": _FABRIC_CLI,
    "tests_fabric/test_fabric.py::test_overridden_run_and_cli_not_allowed": _FABRIC_CLI,
    "tests_fabric/test_fabric.py::test_seed_everything": (
        "expects the environment to hold exactly PL_GLOBAL_SEED and PL_SEED_WORKERS; core's seed_everything also "
        "sets CORE_GLOBAL_SEED and CORE_SEED_WORKERS (docs/migrating-from-lightning.md, 'Checkpoints')"
    ),
    "tests_pytorch/checkpointing/test_checkpoint_callback_frequency.py::test_default_checkpoint_freq": _CHECKED_FILES,
    "tests_pytorch/checkpointing/test_checkpoint_callback_frequency.py::test_top_k": _CHECKED_FILES,
    ("tests_pytorch/trainer/flags/test_val_check_interval.py::"
     "test_val_check_interval_float_with_none_check_val_every_n_epoch"): (
        "expects the message to offer a time-based val_check_interval, which core refuses; core's message asks for "
        "a number of batches (docs/migrating-from-lightning.md, 'The Trainer and the Module')"
    ),
    "tests_pytorch/trainer/test_trainer.py::test_checkpoint_path_input_last": (
        "ckpt_path='last' is the newest checkpoint in the ModelCheckpoints' directories in core, save_last or not; "
        "Lightning loads only a last*.ckpt file and otherwise nothing (docs/migrating-from-lightning.md, "
        "'Checkpoints')"
    ),
    "tests_pytorch/models/test_hooks.py::test_trainer_model_hook_system_fit": _FIT_ORDER,
    "tests_pytorch/models/test_hooks.py::test_trainer_model_hook_system_fit_no_val_and_resume_max_epochs": _FIT_ORDER,
    "tests_pytorch/models/test_hooks.py::test_trainer_model_hook_system_fit_no_val_and_resume_max_steps": _FIT_ORDER,
    "tests_pytorch/trainer/flags/test_overfit_batches.py::test_overfit_batches_same_batch_for_train_and_val": (
        "BoringModel's train and val loaders hold two torch.randn datasets, equal only because Lightning asks for the "
        "val loader inside the sanity check, which restores the random state, and for the train loader after it; "
        "core asks for both before configure_optimizers, so they differ (docs/migrating-from-lightning.md, 'When fit "
        "asks for the loaders'). The overfit behaviour itself (the same sequential batches each epoch) passes"
    ),
    "tests_pytorch/trainer/test_trainer.py::test_train_loop_system": (
        "expects a plain optimizer's step(closure) to run training_step, zero_grad and backward inside the closure; "
        "core zeroes the gradients before training_step and steps after the backward, with a closure only for an "
        "overridden optimizer_step or an optimizer that needs one (docs/migrating-from-lightning.md, 'When the "
        "gradients are zeroed')"
    ),
    "tests_pytorch/trainer/test_trainer.py::test_predict_return_predictions_cpu": (
        "expects predict's outputs in float64 under 64-true; core's step methods run as the forward of the set-up "
        "module, whose outputs come back as float32 (docs/migrating-from-lightning.md, '-true precisions')"
    ),
    "tests_pytorch/trainer/test_trainer.py::test_spawn_predict_return_predictions": (
        "expects predict(return_predictions=True) under ddp_spawn to be refused; core returns global rank 0's "
        "predictions from the spawned processes (docs/migrating-from-lightning.md, 'The Trainer and the Module')"
    ),
    "tests_pytorch/checkpointing/test_model_checkpoint.py::test_model_checkpoint_save_last_as_link_not_local": (
        "calls setup(trainer=..., pl_module=...) by keyword: core's hooks name the argument `module`; core also "
        "refuses save_last='link' with a remote dirpath when the callback is made, before setup "
        "(docs/migrating-from-lightning.md, ModelCheckpoint)"
    ),
}

NOT_APPLICABLE: dict[str, str] = {
    'tests_fabric/test_fabric.py::test_all_gather':
        "uses Lightning's internal `fabric._strategy`",
    'tests_fabric/test_fabric.py::test_all_reduce':
        "uses Lightning's internal `fabric._strategy`",
    'tests_fabric/test_fabric.py::test_autocast':
        "reads Lightning's private attribute `_precision`",
    'tests_fabric/test_fabric.py::test_backward':
        "uses Lightning's internal `fabric._strategy`",
    'tests_fabric/test_fabric.py::test_backward_model_input_required':
        "reads Lightning's private attribute `_strategy`",
    'tests_fabric/test_fabric.py::test_backward_required':
        "uses Lightning's internal `fabric._launched`",
    'tests_fabric/test_fabric.py::test_barrier':
        "uses Lightning's internal `fabric._strategy`",
    'tests_fabric/test_fabric.py::test_broadcast':
        "uses Lightning's internal `fabric._strategy`",
    'tests_fabric/test_fabric.py::test_callback_kwargs_filtering_signature_inspection_failure':
        "patches `inspect` inside a module of Lightning's implementation",
    'tests_fabric/test_fabric.py::test_init_module_context':
        "uses Lightning's internal `fabric._strategy`",
    'tests_fabric/test_fabric.py::test_init_tensor_context':
        "uses Lightning's internal `fabric._strategy`",
    'tests_fabric/test_fabric.py::test_launch_without_function':
        "reads Lightning's private attribute `_strategy`",
    'tests_fabric/test_fabric.py::test_launch_and_strategies_unsupported_combinations':
        "requests the `xla_available` fixture, which mocks Lightning's XLA detection",
    'tests_fabric/test_fabric.py::test_load_wrapped_objects':
        "imports Lightning's private `_FabricModule`",
    'tests_fabric/test_fabric.py::test_module_sharding_context':
        "uses Lightning's internal `fabric._launched`",
    'tests_fabric/test_fabric.py::test_no_backward_sync':
        "uses Lightning's internal `fabric._strategy`",
    'tests_fabric/test_fabric.py::test_rank_properties':
        "uses Lightning's internal `fabric._strategy`",
    'tests_fabric/test_fabric.py::test_rank_zero_first':
        "uses Lightning's internal `fabric._strategy`",
    'tests_fabric/test_fabric.py::test_save_wrapped_objects':
        "imports Lightning's private `_FabricModule`",
    'tests_fabric/test_fabric.py::test_setup_compiled_module':
        "reads Lightning's private attribute `_compile_kwargs`",
    'tests_fabric/test_fabric.py::test_setup_dataloaders_captures_dataloader_arguments':
        "patches Lightning's private method `_replace_dunder_methods`",
    'tests_fabric/test_fabric.py::test_setup_dataloaders_distributed_sampler_not_needed':
        "reads Lightning's private attribute `_dataloader`",
    'tests_fabric/test_fabric.py::test_setup_dataloaders_distributed_sampler_parity':
        "uses Lightning's internal `fabric._launched`",
    'tests_fabric/test_fabric.py::test_setup_dataloaders_distributed_sampler_shuffle':
        "uses Lightning's internal `fabric._launched`",
    'tests_fabric/test_fabric.py::test_setup_dataloaders_raises_for_unknown_custom_args':
        "reads Lightning's private attribute `_dataloader`",
    'tests_fabric/test_fabric.py::test_setup_dataloaders_replace_custom_sampler':
        "uses Lightning's internal `fabric._launched`",
    'tests_fabric/test_fabric.py::test_setup_dataloaders_replace_standard_sampler':
        "uses Lightning's internal `fabric._launched`",
    'tests_fabric/test_fabric.py::test_setup_dataloaders_return_type':
        "imports Lightning's private `_FabricDataLoader`",
    'tests_fabric/test_fabric.py::test_setup_module':
        "uses Lightning's internal `fabric._launched`",
    'tests_fabric/test_fabric.py::test_setup_module_and_optimizers':
        "imports Lightning's private `_FabricModule`",
    'tests_fabric/test_fabric.py::test_setup_optimizers':
        "imports Lightning's private `_FabricOptimizer`",
    'tests_fabric/test_fabric.py::test_setup_optimizers_not_supported':
        "uses Lightning's internal `fabric._launched`",
    'tests_fabric/test_fabric.py::test_setup_tracks_num_models':
        "reads Lightning's private attribute `_models_setup`",
    'tests_fabric/test_fabric.py::test_special_callbacks':
        "uses Lightning's internal `fabric._strategy`",
    'tests_fabric/test_fabric.py::test_verify_launch_called':
        "reads Lightning's private attribute `_launched`",
    'tests_fabric/test_wrappers.py::test_fabric_dataloader_device_placement':
        "imports Lightning's private `_FabricDataLoader`",
    'tests_fabric/test_wrappers.py::test_fabric_dataloader_distributed_sampler_set_epoch':
        "imports Lightning's private `_FabricDataLoader`",
    'tests_fabric/test_wrappers.py::test_fabric_dataloader_iterator':
        "imports Lightning's private `_FabricDataLoader`",
    'tests_fabric/test_wrappers.py::test_fabric_module_attribute_lookup':
        "imports Lightning's private `_FabricModule`",
    'tests_fabric/test_wrappers.py::test_fabric_module_device_dtype_propagation':
        "imports Lightning's private `_DeviceDtypeModuleMixin`",
    'tests_fabric/test_wrappers.py::test_fabric_module_mark_forward_method':
        "imports Lightning's private `_FabricModule`",
    'tests_fabric/test_wrappers.py::test_fabric_module_method_lookup':
        "imports Lightning's private `_FabricModule`",
    'tests_fabric/test_wrappers.py::test_fabric_module_setattr':
        "imports Lightning's private `_FabricModule`",
    'tests_fabric/test_wrappers.py::test_fabric_module_state_dict_access':
        "imports Lightning's private `_FabricModule`",
    'tests_fabric/test_wrappers.py::test_fabric_module_wraps':
        "imports Lightning's private `_FabricModule`",
    'tests_fabric/test_wrappers.py::test_fabric_optimizer_load_state_dict':
        "imports Lightning's private `_FabricOptimizer`",
    'tests_fabric/test_wrappers.py::test_fabric_optimizer_state_dict':
        "imports Lightning's private `_FabricOptimizer`",
    'tests_fabric/test_wrappers.py::test_fabric_optimizer_steps':
        "imports Lightning's private `_FabricOptimizer`",
    'tests_fabric/test_wrappers.py::test_fabric_optimizer_wraps':
        "imports Lightning's private `_FabricOptimizer`",
    'tests_fabric/test_wrappers.py::test_fabric_optimizer_zero_grad_kwargs':
        "imports Lightning's private `_FabricOptimizer`",
    'tests_fabric/test_wrappers.py::test_is_wrapped':
        "imports Lightning's private `_FabricModule`",
    'tests_fabric/test_wrappers.py::test_step_method_redirection':
        "constructs Lightning's private `_FabricModule` around a Mock strategy",
    'tests_fabric/test_wrappers.py::test_unwrap_compiled':
        "uses Lightning's internal `compiled._compile_kwargs`",
    'tests_fabric/test_wrappers.py::test_unwrap_objects':
        "imports Lightning's private `_FabricModule`",
    'tests_fabric/utilities/test_data.py::test_custom_batch_sampler':
        "imports Lightning's private `_update_dataloader`",
    'tests_fabric/utilities/test_data.py::test_custom_batch_sampler_no_sampler':
        "imports Lightning's private `_replace_dunder_methods`",
    'tests_fabric/utilities/test_data.py::test_custom_torch_batch_sampler':
        "imports Lightning's private `_replace_dunder_methods`",
    'tests_fabric/utilities/test_data.py::test_custom_torch_batch_sampler_doppelganger':
        "imports Lightning's private `_update_dataloader`",
    'tests_fabric/utilities/test_data.py::test_dataloader_kwargs_replacement_with_array_default_comparison':
        "imports Lightning's private `_get_dataloader_init_args_and_kwargs`",
    'tests_fabric/utilities/test_data.py::test_dataloader_kwargs_replacement_with_iterable_dataset':
        "imports Lightning's private `_get_dataloader_init_args_and_kwargs`",
    'tests_fabric/utilities/test_data.py::test_replace_dunder_methods_attrs':
        "imports Lightning's private `_replace_dunder_methods`",
    'tests_fabric/utilities/test_data.py::test_replace_dunder_methods_dataloader':
        "imports Lightning's private `_replace_dunder_methods`",
    'tests_fabric/utilities/test_data.py::test_replace_dunder_methods_extra_kwargs':
        "imports Lightning's private `_replace_dunder_methods`",
    'tests_fabric/utilities/test_data.py::test_replace_dunder_methods_multiple_loaders_without_init':
        "imports Lightning's private `_replace_dunder_methods`",
    'tests_fabric/utilities/test_data.py::test_replace_dunder_methods_restore_methods':
        "imports Lightning's private `_replace_dunder_methods`",
    'tests_fabric/utilities/test_data.py::test_replace_value_in_args':
        "imports Lightning's private `_replace_value_in_saved_args`",
    'tests_fabric/utilities/test_data.py::test_set_sampler_epoch':
        "imports Lightning's private `_set_sampler_epoch`",
    'tests_fabric/utilities/test_data.py::test_suggested_max_num_workers':
        "patches `os` inside a module of Lightning's implementation",
    'tests_fabric/utilities/test_data.py::test_suggested_max_num_workers_not_triggering_torch_warning':
        "patches `os` inside a module of Lightning's implementation",
    'tests_fabric/utilities/test_data.py::test_update_dataloader_typerror_custom_exception':
        "imports Lightning's private `_update_dataloader`",
    'tests_fabric/utilities/test_seed.py::test_backward_compatibility_rng_states_dict':
        "imports Lightning's private `_collect_rng_states`",
    'tests_fabric/utilities/test_seed.py::test_collect_rng_states_if_cuda_init_fails':
        "patches `torch` inside a module of Lightning's implementation",
    'tests_fabric/utilities/test_seed.py::test_generate_seed_sequence_no_collision':
        "imports Lightning's private `_generate_seed_sequence`",
    'tests_pytorch/callbacks/test_early_stopping.py::test_check_on_train_epoch_end_smart_handling':
        "patches Lightning's private method `_evaluate_stopping_criteria`",
    'tests_pytorch/callbacks/test_early_stopping.py::test_early_stopping_log_info':
        "patches `lightning.pytorch.callbacks.early_stopping.log.info` inside Lightning's implementation",
    'tests_pytorch/callbacks/test_early_stopping.py::test_early_stopping_no_extraneous_invocations':
        "uses Lightning's internal `early_stop_callback._run_early_stopping_check`",
    'tests_pytorch/callbacks/test_early_stopping.py::test_early_stopping_squeezes':
        "patches Lightning's private method `_evaluate_stopping_criteria`",
    'tests_pytorch/callbacks/test_early_stopping.py::test_min_epochs_min_steps_global_step':
        "patches Lightning's private method `_evaluate_stopping_criteria`",
    'tests_pytorch/checkpointing/test_model_checkpoint.py::test_checkpoint_repeated_strategy_extended':
        "imports Lightning's private `_load`",
    'tests_pytorch/checkpointing/test_model_checkpoint.py::test_ckpt_version_after_rerun_same_trainer':
        "drives Lightning's loop object `trainer.fit_loop`",
    'tests_pytorch/checkpointing/test_model_checkpoint.py::test_find_last_checkpoints':
        "reads Lightning's private attribute `_find_last_checkpoints`",
    'tests_pytorch/checkpointing/test_model_checkpoint.py::test_hparams_type':
        "reads Lightning's private attribute `_checkpoint_connector`",
    'tests_pytorch/checkpointing/test_model_checkpoint.py::test_last_global_step_saved':
        "reads Lightning's private attribute `_save_topk_checkpoint`",
    'tests_pytorch/checkpointing/test_model_checkpoint.py::test_model_checkpoint_format_checkpoint_name':
        "reads Lightning's private attribute `_format_checkpoint_name`",
    'tests_pytorch/checkpointing/test_model_checkpoint.py::test_model_checkpoint_link_checkpoint':
        "reads Lightning's private attribute `_link_checkpoint`",
    'tests_pytorch/checkpointing/test_model_checkpoint.py::test_model_checkpoint_link_checkpoint_relative_path':
        "reads Lightning's private attribute `_link_checkpoint`",
    'tests_pytorch/checkpointing/test_model_checkpoint.py::test_model_checkpoint_save_last':
        "uses Lightning's internal `model_checkpoint._format_checkpoint_name`",
    'tests_pytorch/checkpointing/test_model_checkpoint.py::test_model_checkpoint_score_and_ckpt':
        "drives Lightning's loop object `trainer.fit_loop`",
    'tests_pytorch/checkpointing/test_model_checkpoint.py::test_model_checkpoint_score_and_ckpt_val_check_interval':
        "drives Lightning's loop object `trainer.fit_loop`",
    'tests_pytorch/checkpointing/test_model_checkpoint.py::test_model_checkpoint_train_time_interval':
        "patches `time` inside a module of Lightning's implementation (lightning.pytorch.callbacks.model_checkpoint)",
    'tests_pytorch/checkpointing/test_model_checkpoint.py::test_none_every_n_train_steps_val_epochs':
        "reads Lightning's private attribute `_every_n_train_steps`",
    'tests_pytorch/checkpointing/test_model_checkpoint.py::test_none_monitor_saves_correct_best_model_path':
        "uses Lightning's internal `trainer.strategy.connect`",
    'tests_pytorch/checkpointing/test_model_checkpoint.py::test_save_last_saves_correct_last_model_path':
        "uses Lightning's internal `trainer.strategy.connect`",
    'tests_pytorch/checkpointing/test_model_checkpoint.py::test_train_epoch_end_ckpt_with_no_validation':
        "drives Lightning's loop object `trainer.fit_loop`",
    'tests_pytorch/core/test_datamodules.py::test_can_prepare_data':
        "reads Lightning's private attribute `_data_connector`",
    'tests_pytorch/core/test_datamodules.py::test_dm_checkpoint_save_and_load':
        "uses Lightning's internal `trainer._checkpoint_connector._restore_modules_and_callbacks`",
    'tests_pytorch/core/test_datamodules.py::test_dm_init_from_datasets_dataloaders':
        "mocks the `DataLoader` name imported into Lightning's module `lightning.pytorch.core.datamodule`",
    'tests_pytorch/core/test_lightning_module.py::test_1_optimizer_toggle_model':
        "reads Lightning's private attribute `_param_requires_grad_state`",
    'tests_pytorch/core/test_lightning_module.py::test_fabric_attributes':
        "uses Lightning's internal `wrapped_module._fabric_optimizers`",
    'tests_pytorch/core/test_lightning_module.py::test_fabric_reference_recursively':
        "reads Lightning's private attribute `_fabric`",
    'tests_pytorch/core/test_lightning_module.py::test_optimizer_toggle_model_context_manager':
        "reads Lightning's private attribute `_param_requires_grad_state`",
    'tests_pytorch/core/test_lightning_module.py::test_trainer_reference_recursively':
        "uses Lightning's internal `inner._trainer`",
    'tests_pytorch/loggers/test_csv.py::test_append_metrics_file':
        "patches `_ExperimentWriter` inside a module of Lightning's implementation",
    'tests_pytorch/loggers/test_logger.py::test_np_sanitization':
        "imports Lightning's private `_convert_params`",
    'tests_pytorch/loggers/test_logger.py::test_scan_checkpoints':
        "imports Lightning's private `_scan_checkpoints`",
    'tests_pytorch/models/test_hooks.py::test_load_from_checkpoint_hook_calls':
        "uses Lightning's internal `trainer.strategy.connect`",
    'tests_pytorch/trainer/flags/test_barebones.py::test_barebones_argument_selection':
        "uses Lightning's internal `trainer._detect_anomaly`",
    'tests_pytorch/trainer/flags/test_barebones.py::test_barebones_disables_logging':
        "uses Lightning's internal `pl_module._trainer`",
    'tests_pytorch/trainer/flags/test_env_vars.py::test_passing_env_variables_devices':
        "mocks Lightning's device detection (the `cuda_count_2` and `mps_count_0` fixtures of its conftest)",
    'tests_pytorch/trainer/flags/test_fast_dev_run.py::test_callbacks_and_logger_not_called_with_fastdevrun':
        "uses Lightning's internal `early_stopping_callback._evaluate_stopping_criteria`",
    'tests_pytorch/trainer/flags/test_inference_mode.py::test_no_grad_context':
        "imports Lightning's private `_no_grad_context`",
    'tests_pytorch/trainer/flags/test_limit_batches.py::test_eval_limit_batches':
        "uses Lightning's internal `trainer.strategy.connect`",
    'tests_pytorch/trainer/flags/test_overfit_batches.py::test_distributed_sampler_with_overfit_batches':
        "uses Lightning's internal `trainer.strategy.connect`",
    'tests_pytorch/trainer/flags/test_overfit_batches.py::test_overfit_batch_limits_eval':
        "uses Lightning's internal `trainer.strategy.connect`",
    'tests_pytorch/trainer/flags/test_overfit_batches.py::test_overfit_batch_limits_train':
        "uses Lightning's internal `trainer.strategy.connect`",
    'tests_pytorch/trainer/flags/test_val_check_interval.py::test_time_and_epoch_gated_val_check':
        "uses Lightning's internal `trainer.fit_loop.epoch_loop.val_loop.batch_progress`",
    'tests_pytorch/trainer/flags/test_val_check_interval.py::test_time_based_val_check_interval':
        "uses Lightning's internal `trainer.fit_loop.epoch_loop.val_loop.batch_progress`",
    'tests_pytorch/trainer/flags/test_val_check_interval.py::test_validation_check_interval_exceed_data_length_correct':
        "drives Lightning's loop object `trainer.fit_loop`",
    'tests_pytorch/trainer/logging_/test_eval_loop_logging.py::test_log_works_in_test_callback':
        "reads Lightning's private attribute `_results`",
    'tests_pytorch/trainer/logging_/test_eval_loop_logging.py::test_multiple_dataloaders_reset':
        "reads Lightning's private attribute `_results`",
    'tests_pytorch/trainer/logging_/test_eval_loop_logging.py::test_native_print_results':
        "imports Lightning's internal `core.lightning.pytorch.loops`",
    'tests_pytorch/trainer/logging_/test_eval_loop_logging.py::test_native_print_results_encodings':
        "imports Lightning's internal `core.lightning.pytorch.loops`",
    'tests_pytorch/trainer/logging_/test_eval_loop_logging.py::test_rich_print_results':
        "imports Lightning's private `_EvaluationLoop`",
    'tests_pytorch/trainer/logging_/test_train_loop_logging.py::test_on_epoch_logging_with_sum_and_on_batch_start':
        "reads Lightning's private attribute `_results`",
    'tests_pytorch/trainer/logging_/test_train_loop_logging.py::test_unsqueezed_tensor_logging':
        "uses Lightning's internal `model._current_fx_name`",
    'tests_pytorch/trainer/test_trainer.py::test_best_ckpt_evaluate_raises_warning_with_multiple_ckpt_callbacks':
        "uses Lightning's internal `trainer._checkpoint_connector._parse_ckpt_path`",
    'tests_pytorch/trainer/test_trainer.py::test_checkpoint_path_input_last_fault_tolerant':
        "uses Lightning's internal `trainer._checkpoint_connector._parse_ckpt_path`",
    'tests_pytorch/trainer/test_trainer.py::test_dataloaders_are_not_loaded_if_disabled_through_limit_batches':
        "uses Lightning's internal `trainer.strategy.connect`",
    'tests_pytorch/trainer/test_trainer.py::test_exception_when_testing_or_validating_with_fast_dev_run':
        "reads Lightning's private attribute `_checkpoint_connector`",
    'tests_pytorch/trainer/test_trainer.py::test_fit_ckpt_path_epoch_restored':
        "imports Lightning's private `_load`",
    'tests_pytorch/trainer/test_trainer.py::test_init_module_context':
        "uses Lightning's internal `trainer._accelerator_connector`",
    'tests_pytorch/trainer/test_trainer.py::test_keyboard_interrupt':
        "reads Lightning's private attribute `_launcher`",
    'tests_pytorch/trainer/test_trainer.py::test_model_checkpoint_only_weights':
        "reads Lightning's private attribute `_checkpoint_connector`",
    'tests_pytorch/trainer/test_trainer.py::test_model_checkpoint_options':
        "drives Lightning's loop object `trainer.fit_loop`",
    'tests_pytorch/trainer/test_trainer.py::test_module_current_fx_attributes_reset':
        "reads Lightning's private attribute `_current_fx_name`",
    'tests_pytorch/trainer/test_trainer.py::test_num_sanity_val_steps':
        "drives Lightning's loop object `trainer.fit_loop`",
    'tests_pytorch/trainer/test_trainer.py::test_num_sanity_val_steps_neg_one':
        "drives Lightning's loop object `trainer.fit_loop`",
    'tests_pytorch/trainer/test_trainer.py::test_trainer_config_device_ids':
        "mocks Lightning's device detection (`mock_cuda_count` of its conftest)",
    'tests_pytorch/trainer/test_trainer.py::test_trainer_config_strategy':
        "mocks Lightning's device detection (`mock_cuda_count` of its conftest)",
    'tests_pytorch/trainer/test_trainer.py::test_trainer_max_steps_and_epochs_fit_loop_done':
        "uses Lightning's internal `trainer.fit_loop`",
    'tests_pytorch/trainer/test_trainer.py::test_trainer_predict_cpu':
        "reads Lightning's private attribute `_accelerator_connector`",
    'tests_pytorch/trainer/test_trainer.py::test_trainer_predict_ddp_spawn':
        "reads Lightning's private attribute `_accelerator_connector` (its prediction writer's hooks) and checks "
        "the launcher against the private `_MultiProcessingLauncher`",
    'tests_pytorch/trainer/test_trainer.py::test_trainer_predict_grad':
        "imports Lightning's private `_MultiProcessingLauncher`",
    'tests_pytorch/trainer/test_trainer.py::test_trainer_predict_no_return':
        "its helper predict() imports Lightning's private `_MultiProcessingLauncher` (the warning it checks is "
        "tested in tests/test_lightning_parity_trainer.py)",
}
