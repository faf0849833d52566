"""Installs ``layerscope-trace.pth`` next to the package in site-packages (regular and editable
installs): the hook that lets ``LAYERSCOPE_TRACE=1 python script.py`` trace a script that never
imports layerscope; and builds the optional C scanner for trace JSON
(``layerscope.trace._chrome_scan``), the scheduler's event loop (``layerscope.schedule._event_loop``) and
the Perfetto writer's packet loop (``layerscope.trace._perfetto_packets``): where no C compiler is
available the build of those extensions is skipped and the pure-Python readers and loops are used. Everything else is configured in
pyproject.toml."""

from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

PTH = "layerscope-trace.pth"


class BuildPyWithPth(build_py):
    """``build_py`` that also places the .pth file at the root of the build (site-packages)."""

    def run(self) -> None:
        super().run()
        self.copy_file(str(Path("src") / PTH), str(Path(self.build_lib) / PTH), preserve_mode=False)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / PTH)]


class EditableWheelWithPth(editable_wheel):
    """Editable installs put the .pth file at the root of the editable wheel (site-packages) too:
    the editable wheel holds only what is copied into its unpacked tree, not build_py's outputs."""

    def _run_build_commands(self, dist_name, unpacked_wheel, build_lib, tmp_dir):  # type: ignore[no-untyped-def]
        result = super()._run_build_commands(dist_name, unpacked_wheel, build_lib, tmp_dir)
        self.copy_file(str(Path("src") / PTH), str(Path(unpacked_wheel) / PTH), preserve_mode=False)
        return result


cmdclass: dict[str, type] = {"build_py": BuildPyWithPth}
# ``_run_build_commands`` is setuptools' own hook (present since editable wheels arrived in 64);
# should a future setuptools drop it, editable installs still work, only without the .pth file.
if hasattr(editable_wheel, "_run_build_commands"):
    cmdclass["editable_wheel"] = EditableWheelWithPth
# optional=True: a failed compile is a warning, not a failed install (chrome_fast falls back to msgspec)
CHROME_SCAN = Extension("layerscope.trace._chrome_scan", sources=["src/layerscope/trace/_chrome_scan.c"],
                        optional=True)
# No floating-point contraction: the C loop must round exactly as the Python loop it mirrors (no fused
# multiply-adds), so that both give bit-identical schedules.
EVENT_LOOP = Extension("layerscope.schedule._event_loop", sources=["src/layerscope/schedule/_event_loop.c"],
                       extra_compile_args=["-ffp-contract=off"], optional=True)
# optional=True here too: without it perfetto_writer joins the packets in Python (the same bytes).
PERFETTO_PACKETS = Extension("layerscope.trace._perfetto_packets",
                             sources=["src/layerscope/trace/_perfetto_packets.c"], optional=True)
setup(cmdclass=cmdclass, ext_modules=[CHROME_SCAN, EVENT_LOOP, PERFETTO_PACKETS])
