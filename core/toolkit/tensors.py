"""Tensors and modules, for strategies and precisions (imports torch).

:func:`apply_to_tensors` maps a function over the tensors of nested dicts, lists, tuples and named tuples, keeping
a mapping's attributes (a state dict's ``_metadata``) and mapping a tensor reachable twice once; it is the one
walker the core and the first-party plugins use; :func:`named_tensors` lists the same tensors with their
dotted paths, for messages. :func:`hook_keys` and :func:`remove_added` record a module tree's
hooks before a wrapper is applied and remove what the wrapper added at teardown. :class:`EmptyInit` creates
modules without running ``torch.nn.init`` (``init_module(empty_init=True)`` on one device);
:func:`materialize_meta_tensors` allocates and re-initialises a module's meta-device parts.
"""

from core.toolkit._collections import apply_to_tensors, named_tensors
from core.toolkit._empty_init import EmptyInit, materialize_meta_tensors
from core.toolkit._module_additions import hook_keys, remove_added

__all__ = [
    "EmptyInit",
    "apply_to_tensors",
    "hook_keys",
    "materialize_meta_tensors",
    "named_tensors",
    "remove_added",
]
