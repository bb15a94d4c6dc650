"""The build of tupleflow's one C extension, ``runtime.engine._hot`` (the acking path's
hottest closures: docs/internals/performance.md). Everything else about the package
lives in pyproject.toml; this file exists because an extension module cannot be
declared there.

The extension is optional: where no C compiler or no Python headers exist, the build
says so and the install goes on in pure Python (runtime/engine/wiring.py then uses its
Python closures, as it does with TUPLEFLOW_PURE_PYTHON=1)."""

from glob import glob

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class _OptionalBuildExt(build_ext):
    """``build_ext`` that says, in one line, when the extension was not built."""

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:  # optional=True lets setuptools go on; say it plainly
            print(f"tupleflow: {ext.name} not built ({exc}); the engine runs in pure "
                  "Python (set TUPLEFLOW_PURE_PYTHON=1 to make the tests expect that)")
            raise


setup(
    ext_modules=[Extension("runtime.engine._hot", sorted(glob("runtime/engine/_hot*.c")),
                           depends=["runtime/engine/_hot.h"], optional=True,
                           extra_compile_args=["-O2", "-fvisibility=hidden"])],
    cmdclass={"build_ext": _OptionalBuildExt},
)
