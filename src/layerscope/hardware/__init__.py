"""layerscope.hardware: what a chip can do, as the cost models see it.

:class:`HardwareSpec` (engines, peak FLOP/s per dtype, memory levels, interconnect, launch
overhead, efficiencies, and a citation for each figure); bundled presets
(:func:`list_presets`); loaders for YAML, JSON and spreadsheet-style CSV/XLSX
(:func:`load_hardware`), and :func:`dump_hardware_yaml` for round trips. :class:`ClusterSpec`: N nodes × G GPUs,
the NVLink-domain fabric and the network (:func:`load_cluster`, :func:`cluster_names`; docs/clusters.md).
"""

from typing import TYPE_CHECKING

from layerscope.lazy import lazy_exports

if TYPE_CHECKING:
    from layerscope.hardware.cluster import ClusterSpec, GroupPlacement, cluster_names, load_cluster
    from layerscope.hardware.loaders import (
        LOADERS,
        dump_hardware_json,
        dump_hardware_yaml,
        load_hardware,
        write_hardware_sheet,
    )
    from layerscope.hardware.presets import bundled_spreadsheet_example, list_presets, preset_names
    from layerscope.hardware.spec import (
        ColdCost,
        EfficiencySpec,
        EnergySpec,
        EngineSpec,
        ExecutionSpec,
        FreshPages,
        HardwareSpec,
        InterconnectSpec,
        MemoryLevel,
        ResolvedFlops,
    )

__all__ = [
    "LOADERS",
    "ClusterSpec",
    "ColdCost",
    "EfficiencySpec",
    "EnergySpec",
    "EngineSpec",
    "ExecutionSpec",
    "FreshPages",
    "GroupPlacement",
    "HardwareSpec",
    "InterconnectSpec",
    "MemoryLevel",
    "ResolvedFlops",
    "bundled_spreadsheet_example",
    "cluster_names",
    "dump_hardware_json",
    "dump_hardware_yaml",
    "list_presets",
    "load_cluster",
    "load_hardware",
    "preset_names",
    "write_hardware_sheet",
]

__getattr__, __dir__ = lazy_exports(__name__, {
    "layerscope.hardware.cluster": ("ClusterSpec", "GroupPlacement", "cluster_names", "load_cluster"),
    "layerscope.hardware.loaders": (
        "LOADERS", "dump_hardware_json", "dump_hardware_yaml", "load_hardware", "write_hardware_sheet",
    ),
    "layerscope.hardware.presets": ("bundled_spreadsheet_example", "list_presets", "preset_names"),
    "layerscope.hardware.spec": (
        "ColdCost", "EfficiencySpec", "EnergySpec", "EngineSpec", "ExecutionSpec", "FreshPages", "HardwareSpec",
        "InterconnectSpec", "MemoryLevel", "ResolvedFlops",
    ),
})
