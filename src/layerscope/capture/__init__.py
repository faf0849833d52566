"""layerscope.capture: torch.profiler captures of Hugging Face causal LMs, every module annotated
with its op name. Importing this package does not import torch; :func:`capture` does."""

from layerscope.capture.annotate import module_op_name
from layerscope.capture.api import CaptureResult, capture
from layerscope.capture.summary import ModuleRecord, PhaseRecord

__all__ = ["CaptureResult", "ModuleRecord", "PhaseRecord", "capture", "module_op_name"]
