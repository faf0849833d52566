"""Bad inputs, made in code: hostile bytes, mutated real configs and specs, bombs, special files.

Real inputs come from the bundled catalog, the bundled presets and ``tests/data``; every bad one is
derived from them here, so the corpus commits no input files.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import random
import shutil
import zipfile
from functools import cache
from pathlib import Path
from typing import Any

from .harness import Make

REPO = Path(__file__).resolve().parents[2]
CATALOG = REPO / "src" / "layerscope" / "model" / "catalog"
PRESETS = REPO / "src" / "layerscope" / "hardware" / "presets"
TRACES = REPO / "tests" / "data" / "traces"
GOLDEN = REPO / "tests" / "data" / "golden"

LLAMA_DIR = "meta-llama--Llama-3.2-1B"
"""32 query heads, 8 KV heads, hidden 2048, head_dim 64, max_position_embeddings 131072."""
MISTRAL_DIR = "mistralai--Mistral-7B-v0.1"
QWEN_MOE_DIR = "Qwen--Qwen3-30B-A3B"


# -- bytes --------------------------------------------------------------------------------


def random_bytes(n: int = 4096, seed: int = 24) -> bytes:
    """Reproducible noise that is not UTF-8 (starts with an invalid byte) and not gzip/zip/protobuf-clean."""
    return b"\xff\xfe\x80" + random.Random(seed).randbytes(n)


def nested(opening: str, depth: int, closing: str = "") -> bytes:
    """``opening`` repeated ``depth`` times (unclosed unless ``closing`` is given)."""
    return (opening * depth + closing * depth).encode()


@cache
def gzip_of(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=9, mtime=0)


def gzip_bomb(megabytes: int, fill: bytes = b" ") -> bytes:
    """``megabytes`` MiB of ``fill`` compressed: about 1/1000 of that on disk."""
    out = io.BytesIO()
    chunk = fill * (1 << 20)
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=9, mtime=0) as gz:
        for _ in range(megabytes):
            gz.write(chunk)
    return out.getvalue()


def truncated_gzip(path: Path, keep: float = 0.5) -> bytes:
    data = path.read_bytes()
    return data[: int(len(data) * keep)]


def yaml_bomb(levels: int = 9, width: int = 9) -> bytes:
    """The "billion laughs": each alias list holds ``width`` aliases of the one before (9 × 9: 351 bytes)."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, levels):
        prev, name = chr(ord("a") + level - 1), chr(ord("a") + level)
        lines.append(f"{name}: &{name} [" + ",".join(f"*{prev}" for _ in range(width)) + "]")
    return ("\n".join(lines) + "\n").encode()


# -- real inputs and their mutations -------------------------------------------------------------


@cache
def catalog_config(folder: str = LLAMA_DIR) -> dict[str, Any]:
    return json.loads((CATALOG / folder / "config.json").read_text())


def config_with(folder: str = LLAMA_DIR, drop: tuple[str, ...] = (), **changes: Any) -> bytes:
    """A bundled config.json with keys changed or dropped (``None`` values are written as null)."""
    cfg = dict(catalog_config(folder))
    for key in drop:
        cfg.pop(key, None)
    cfg.update(changes)
    return json.dumps(cfg, indent=2).encode()


def config_text(folder: str = LLAMA_DIR) -> bytes:
    return (CATALOG / folder / "config.json").read_bytes()


@cache
def preset_text(name: str = "h100-sxm") -> str:
    return (PRESETS / f"{name}.yaml").read_text()


def preset_with(old: str, new: str, name: str = "h100-sxm") -> bytes:
    """The bundled preset's YAML with one exact line fragment replaced (checked to be there)."""
    text = preset_text(name)
    assert old in text, f"{old!r} is not in the {name} preset"
    return text.replace(old, new, 1).encode()


def preset_json_with(path: tuple[str, ...], value: Any, name: str = "h100-sxm") -> bytes:
    """The bundled preset as JSON with the field at ``path`` set (a list index may be an int string)."""
    import yaml

    data = yaml.safe_load(preset_text(name))
    node: Any = data
    for key in path[:-1]:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if isinstance(node, list):
        node[int(path[-1])] = value
    else:
        node[path[-1]] = value
    return json.dumps(data).encode()


SHEET_ROWS = {
    "Num_Cores": "32",
    "Frequency": "2.5 GHz",
    "MACs_per_cycle": "2048",
    "Bandwidth": "342 GB/s",
    "L3_cache_capacity": "36 MB",
}


def sheet(drop: tuple[str, ...] = (), **rows: str) -> bytes:
    """A one-device spreadsheet (CSV) in the documented layout, with rows changed or dropped."""
    merged = {**{k: v for k, v in SHEET_ROWS.items() if k not in drop}, **rows}
    lines = ["Parameter,NVL-AX", *(f"{name},{value}" for name, value in merged.items())]
    return ("\n".join(lines) + "\n").encode()


TWO_DEVICE_SHEET = (
    b"Parameter,NVL-AX,JGS\nNum_Cores,32,192\nFrequency,2.5 GHz,1.5 GHz\nMACs_per_cycle,2048,8192\n"
    b"Bandwidth,342 GB/s,30 TB/s\n"
)

SEED_SHEET = (
    b",NVL-AX,JGS\nNum_Cores,32,192\nFrequency,2500000000.0,1500000000.0\nMACs_per_cycle,2048,8192\n"
    b"Bandwidth,367219703808,32985348833280\nL3_cache_capacity,37748736,125829120\n"
)
"""../shared/data/seed-hardware-sheet.csv as written: plain numbers in base units."""


def zip_without_workbook() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        zf.writestr("hello.txt", "not a workbook")
    return out.getvalue()


def trace_file(name: str) -> bytes:
    """A committed trace: ``cpu-only.json.gz`` (30 events, Kineto), ``tiny_layer_trace.json`` or
    ``.pftrace`` (simulated)."""
    for folder in (TRACES, GOLDEN):
        if (folder / name).is_file():
            return (folder / name).read_bytes()
    raise FileNotFoundError(name)


def chrome_trace(events: list[Any], **top: Any) -> bytes:
    return json.dumps({"traceEvents": events, **top}).encode()


def deep_args_trace(depth: int) -> bytes:
    """One complete event whose ``args`` nest ``depth`` objects deep."""
    args = '{"a":' * depth + "1" + "}" * depth
    event = f'{{"ph":"X","name":"op","pid":1,"tid":1,"ts":1,"dur":2,"args":{args}}}'
    return ('{"traceEvents":[' + event + "]}").encode()


def markup_trace() -> bytes:
    """Events named like rich markup and emoji codes: text from data, to be printed as it is."""
    events = [{"ph": "X", "name": name, "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5}
              for i, name in enumerate(["[/bold]", ":x:", "[red]op[/red]", "aten::mm"])]
    return chrome_trace(events)


# -- special paths ------------------------------------------------------------------------------


def directory(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)


def copy_of(source: Path) -> Make:
    return Make(lambda path: shutil.copyfile(source, path))


def model_dir(folder: str = LLAMA_DIR) -> Make:
    """A checkpoint-style directory holding one bundled config.json."""

    def make(path: Path) -> None:
        path.mkdir(parents=True)
        shutil.copyfile(CATALOG / folder / "config.json", path / "config.json")

    return Make(make)


def symlink_to(target: str) -> Make:
    return Make(lambda path: path.symlink_to(target))


def fifo(path: Path) -> None:
    os.mkfifo(path)


DIR = Make(directory)
FIFO = Make(fifo)
