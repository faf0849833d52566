"""layerscope: where the time goes when a transformer language model runs.

Importing this package is cheap and never imports torch; the subpackages are imported on use.
``layerscope.tracing(DIR)`` (a context manager recording the operator workloads of the HF models
run inside it) is resolved lazily, on first access.
"""

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "tracing":
        from layerscope.capture.recorder import tracing

        return tracing
    raise AttributeError(f"module 'layerscope' has no attribute {name!r}")
