"""Facts about the machine this process runs on that need no torch (for spec names and bench lines)."""

from __future__ import annotations

import os
import platform
import re
import time
from dataclasses import dataclass
from pathlib import Path

from layerscope.units import atomic_write


def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo (Linux), else what ``platform`` says, else ``"CPU"``."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "CPU"


# --- CPU load of other processes -------------------------------------------------------------------------------
# /proc/stat's first line counts, in clock ticks since boot, the time all CPUs spent per state (proc(5)):
# user nice system idle iowait irq softirq steal guest guest_nice; /proc/self/stat's fields 14 and 15 are this
# process's user and system ticks over all its threads. Busy time not ours is other processes' (or the kernel's for
# them); steal is time the hypervisor gave our virtual CPUs to other guests. Both take cores our threads wanted.
_BUSY_FIELDS = (0, 1, 2, 5, 6)  # user, nice, system, irq, softirq
_STEAL_FIELD = 7


#: Cores' worth by which our threads plus the others' load may exceed the cores before a window counts as busy.
BUSY_OVERSUBSCRIBED_CORES = 0.25


@dataclass(frozen=True)
class CpuSample:
    """Cumulative CPU ticks at one moment (``os.times``-style counters read from /proc)."""

    wall_s: float
    busy_ticks: int
    """All CPUs' busy ticks (user, nice, system, irq, softirq)."""
    steal_ticks: int
    own_ticks: int
    """This process's user + system ticks, all threads."""


@dataclass(frozen=True)
class CpuLoad:
    """What the CPUs did over ``wall_s`` seconds, in cores' worth (CPU-seconds per second)."""

    wall_s: float
    cores: int
    """Online logical CPUs."""
    own_cores: float
    """This process (all its threads)."""
    others_cores: float
    """Every other process, and the kernel's work for them."""
    steal_cores: float
    """Time the hypervisor ran other guests on this machine's virtual CPUs."""

    @property
    def busy_cores(self) -> float:
        """Cores' worth taken from this process by others: other processes plus steal."""
        return self.others_cores + self.steal_cores

    def free_cores(self) -> float:
        """Cores' worth left for this process."""
        return max(0.0, self.cores - self.busy_cores)

    def oversubscribed_cores(self, threads: int) -> float:
        """How far ``threads`` busy threads plus the others' load exceed the cores (0: everyone had a core)."""
        return max(0.0, threads + self.busy_cores - self.cores)

    def is_busy_for(self, threads: int) -> bool:
        """Whether the others took cores ``threads`` threads needed (:data:`BUSY_OVERSUBSCRIBED_CORES` or more)."""
        return self.oversubscribed_cores(threads) >= BUSY_OVERSUBSCRIBED_CORES

    def to_dict(self) -> dict[str, float | int]:
        return {"wall_s": self.wall_s, "cores": self.cores, "own_cores": self.own_cores,
                "others_cores": self.others_cores, "steal_cores": self.steal_cores, "busy_cores": self.busy_cores}


def cpu_sample() -> CpuSample | None:
    """The CPU counters now; ``None`` where /proc cannot tell (not Linux)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
        own = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 9 or len(own) < 13:
        return None
    try:
        ticks = [int(x) for x in fields[1:9]]
        # After the ")" of the command name, field 3 (state) is index 0: utime (14) and stime (15) are 11 and 12.
        own_ticks = int(own[11]) + int(own[12])
    except ValueError:
        return None
    return CpuSample(time.perf_counter(), sum(ticks[i] for i in _BUSY_FIELDS), ticks[_STEAL_FIELD], own_ticks)


def load_between(start: CpuSample | None, end: CpuSample | None) -> CpuLoad | None:
    """The load over the window from ``start`` to ``end``; ``None`` when either is unknown or the window is empty."""
    if start is None or end is None or end.wall_s <= start.wall_s:
        return None
    hz = _ticks_per_s()
    wall_s = end.wall_s - start.wall_s
    own = (end.own_ticks - start.own_ticks) / hz / wall_s
    busy = (end.busy_ticks - start.busy_ticks) / hz / wall_s
    steal = (end.steal_ticks - start.steal_ticks) / hz / wall_s
    return CpuLoad(wall_s, os.cpu_count() or 1, own, max(0.0, busy - own), max(0.0, steal))


def measure_load(seconds: float) -> CpuLoad | None:
    """Sleep ``seconds`` and return what the other processes did meanwhile."""
    start = cpu_sample()
    time.sleep(seconds)
    return load_between(start, cpu_sample())


def _ticks_per_s() -> float:
    try:
        return float(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError, AttributeError):
        return 100.0


# --- Where specs measured on this machine are kept -------------------------------------------------------------
MACHINES_DIR_ENV = "LAYERSCOPE_MACHINES_DIR"


def machines_dir() -> Path:
    """Where ``calibrate`` keeps this machine's spec for ``demo`` and ``validate``: ``$LAYERSCOPE_MACHINES_DIR``,
    else ``$XDG_CACHE_HOME/layerscope/machines``, else ``~/.cache/layerscope/machines``."""
    env = os.environ.get(MACHINES_DIR_ENV)
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "layerscope" / "machines"


def machine_key(device: str, device_name: str, threads: int) -> str:
    """File stem of a saved spec: the device kind, its model name and the thread count it ran with
    (``cpu-amd-epyc-7763-64-core-processor-2t``); a spec measured with other threads or on another chip
    is another file."""
    return f"{_key_prefix(device, device_name)}{threads}t"


def _key_prefix(device: str, device_name: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-")[:80] or "unknown"
    return f"{device}-{slug}-"


def saved_spec_path(device: str, device_name: str, threads: int) -> Path:
    """Where the calibrated spec of this device at ``threads`` threads is kept (it may not exist)."""
    return machines_dir() / f"{machine_key(device, device_name, threads)}.yaml"


def saved_spec_paths(device: str, device_name: str) -> list[Path]:
    """Every calibrated spec kept for this device, whatever its thread count."""
    prefix = _key_prefix(device, device_name)
    return sorted(p for p in machines_dir().glob(f"{prefix}*t.yaml") if p.name[len(prefix):-len("t.yaml")].isdigit())


def keep_spec(path: Path, yaml_text: str) -> Path:
    """Write a spec where :func:`saved_spec_path`/:func:`quick_spec_path` say (its folder created); returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path, "w") as fh:
        fh.write(yaml_text)
    return path


def quick_spec_path(device: str, device_name: str, threads: int) -> Path:
    """Where ``demo`` keeps its own quick measurement of this device at ``threads`` threads, for later demos
    (a ``calibrate`` spec, :func:`saved_spec_path`, comes first)."""
    return machines_dir() / f"{machine_key(device, device_name, threads)}.quick.yaml"
