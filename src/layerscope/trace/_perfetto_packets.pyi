"""The Perfetto writer's event loop in C (``_perfetto_packets.c``);
:func:`layerscope.trace.perfetto_writer.write_perfetto_protobuf` calls it."""

from collections.abc import Callable, Mapping, Sequence
from typing import Any

def write_events(
    write: Callable[[bytes], Any],
    codes: Any,
    n_counters: int,
    delta: Any,
    counter_blob: bytes,
    counter_off: Any,
    order: Any,
    is_end: Any,
    engine: Any,
    names: Sequence[str],
    template: Any,
    template_pieces: Sequence[bytes],
    layer_index: Any | None,
    layer_pieces: Sequence[bytes],
    module: Sequence[str] | None,
    module_pieces: Mapping[str, bytes],
    indptr: Any,
    elem_blob: bytes,
    elem_off: Any,
    out_blob: bytes,
    out_ptr: Any,
    in_blob: bytes,
    in_ptr: Any,
    str_iid: Any,
    first_interned: bytes,
    track_fields: Sequence[bytes],
    end_tails: Sequence[bytes],
    keys: tuple[bytes, ...],
    /,
) -> None: ...
