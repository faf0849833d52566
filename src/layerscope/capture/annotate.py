"""Module annotations: every HF module runs inside a profiler range named after its op name.

The op name of a module is its ``named_modules()`` path with the base-model prefix stripped
(``model.layers.0.self_attn.q_proj`` -> ``layers.0.self_attn.q_proj``), the same name
:mod:`layerscope.graph` gives the op, so captured and simulated traces join by name.

torch is imported only inside functions: importing this module never imports torch.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

#: Base-model attribute prefixes stripped when no ``ModelSpec`` names the root, longest first so
#: ``model.decoder.`` (OPT) and ``model.language_model.`` (multimodal) win over ``model.``.
BASE_PREFIXES: tuple[str, ...] = ("model.language_model.", "model.decoder.", "transformer.", "model.")


def module_op_name(path: str, root: str | None = None) -> str:
    """The op name of the module at ``path`` (a ``named_modules()`` key).

    ``root`` is the prefix of the decoder stack (``ModelSpec.modules.root``: ``model.``,
    ``transformer.``); without it the first matching entry of :data:`BASE_PREFIXES` is stripped.
    Modules outside the root (``lm_head``) keep their path. The root module itself (``model``)
    and the top-level model (``""``) map to ``""``: they are not ops.
    """
    prefixes = (root,) if root else BASE_PREFIXES
    for prefix in prefixes:
        if path.startswith(prefix):
            return path[len(prefix):]
        if path == prefix.rstrip("."):
            return ""
    return path


Shape = tuple[int, ...]


@dataclass
class ModuleCalls:
    """What the hooks saw of one module in one phase: call count and the first call's shapes."""

    name: str
    phase: str
    calls: int = 0
    input_shapes: list[Shape] = field(default_factory=list)
    """Shapes of the tensor arguments of the first call (positional, then keyword, in order)."""
    output_shapes: list[Shape] = field(default_factory=list)


def _tensor_shapes(value: Any, depth: int = 0) -> list[Shape]:
    """Shapes of the tensors in ``value``, looking one level into tuples/lists/dicts (HF passes
    ``position_embeddings=(cos, sin)`` and returns ``(hidden, attn_weights)``)."""
    import torch

    if isinstance(value, torch.Tensor):
        return [tuple(int(d) for d in value.shape)]
    if depth >= 1:
        return []
    items: Any
    if isinstance(value, dict):
        items = value.values()
    elif isinstance(value, (tuple, list)):
        items = value
    elif hasattr(value, "to_tuple") and hasattr(value, "keys"):  # HF ModelOutput
        items = value.to_tuple()
    else:
        return []
    shapes: list[Shape] = []
    for item in items:
        shapes.extend(_tensor_shapes(item, depth + 1))
    return shapes


def annotated_modules(model: Any, root: str | None = None) -> list[tuple[str, Any]]:
    """(op name, module) of every module of ``model`` a capture times, in ``named_modules()`` order:
    all but the root itself and the ``ModuleList``/``ModuleDict`` containers, which are never called."""
    import torch

    containers = (torch.nn.ModuleList, torch.nn.ModuleDict)
    named = ((module_op_name(path, root), module) for path, module in model.named_modules())
    return [(name, module) for name, module in named if name and not isinstance(module, containers)]


class ModuleAnnotator:
    """Context manager that wraps each module's forward in ``record_function(op_name)``.

    A forward pre-hook enters a :class:`torch.autograd.profiler.record_function` and a forward
    hook exits it, so module ranges nest exactly as the calls do. Hooks return ``None`` and so
    never change a module's inputs or outputs. All hooks are removed on exit, and any range left
    open by an exception inside a forward is closed, innermost first.

    ``phase`` is set by the runner (``prefill`` / ``decode``) and keys the shape records. (The
    unprofiled pass times whole calls instead: :class:`layerscope.capture.unprofiled.ModuleCallTimer`.)
    """

    def __init__(self, model: Any, root: str | None = None) -> None:
        self._model = model
        self._root = root
        self._handles: list[Any] = []
        self._stack: list[tuple[str, Any]] = []
        self.phase = "prefill"
        self.calls: dict[tuple[str, str], ModuleCalls] = {}
        self.names: list[str] = []
        """Op names of the annotated modules, in ``named_modules()`` order."""

    def __enter__(self) -> ModuleAnnotator:
        for name, module in annotated_modules(self._model, self._root):
            self.names.append(name)
            self._handles.append(
                module.register_forward_pre_hook(self._make_pre_hook(name), with_kwargs=True)
            )
            self._handles.append(module.register_forward_hook(self._make_post_hook(name), always_call=True))
        return self

    def __exit__(self, *exc: object) -> None:
        while self._stack:
            name, ctx = self._stack.pop()
            logger.debug("closing range %s left open by an exception", name)
            ctx.__exit__(None, None, None)
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _record(self, name: str) -> ModuleCalls:
        key = (self.phase, name)
        rec = self.calls.get(key)
        if rec is None:
            rec = self.calls[key] = ModuleCalls(name=name, phase=self.phase)
        return rec

    def _make_pre_hook(self, name: str) -> Any:
        from torch.autograd.profiler import record_function

        def pre_hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            rec = self._record(name)
            if rec.calls == 0:
                rec.input_shapes = _tensor_shapes(args) + _tensor_shapes(kwargs)
            rec.calls += 1
            ctx = record_function(name)
            ctx.__enter__()
            self._stack.append((name, ctx))

        return pre_hook

    def _make_post_hook(self, name: str) -> Any:
        def post_hook(module: Any, args: tuple[Any, ...], output: Any) -> None:
            if not self._stack or self._stack[-1][0] != name:
                # always_call fires after an exception too; the range was never entered or
                # belongs to an outer frame: __exit__ closes what is left.
                return
            _, ctx = self._stack.pop()
            ctx.__exit__(None, None, None)
            rec = self._record(name)
            if not rec.output_shapes:
                rec.output_shapes = _tensor_shapes(output)

        return post_hook
