"""layerscope.model: ``ModelSpec`` from HF ``config.json`` (local file/folder, bundled catalog, HF cache).

Never imports torch or transformers and never touches the network.
"""

from typing import TYPE_CHECKING

from layerscope.lazy import lazy_exports

if TYPE_CHECKING:
    from layerscope.model.catalog import CatalogEntry, list_catalog
    from layerscope.model.loader import load_model_spec, model_spec_from_dict
    from layerscope.model.params import ParamCounts, param_counts, weight_bytes
    from layerscope.model.spec import MLASpec, ModelSpec, ModuleNames, MoESpec
    from layerscope.model.tiny import tiny_config

__all__ = [
    "CatalogEntry",
    "MLASpec",
    "MoESpec",
    "ModelSpec",
    "ModuleNames",
    "ParamCounts",
    "list_catalog",
    "load_model_spec",
    "model_spec_from_dict",
    "param_counts",
    "tiny_config",
    "weight_bytes",
]

__getattr__, __dir__ = lazy_exports(__name__, {
    "layerscope.model.catalog": ("CatalogEntry", "list_catalog"),
    "layerscope.model.loader": ("load_model_spec", "model_spec_from_dict"),
    "layerscope.model.params": ("ParamCounts", "param_counts", "weight_bytes"),
    "layerscope.model.spec": ("MLASpec", "ModelSpec", "ModuleNames", "MoESpec"),
    "layerscope.model.tiny": ("tiny_config",),
})
