"""layerscope: where the time goes when a transformer language model runs.

Importing this package is cheap and never imports torch; the subpackages are imported on use.
"""

__version__ = "0.1.0"
