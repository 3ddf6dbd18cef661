"""Builds seglake's optional C kernel, the top-level module ``seglake_native``
(``seglake_native.c``): ``make venv`` installs it into the venv's site-packages (not
editable, so a packed venv carries it to Spark executors). Without it seglake runs its
numpy code (``seglake.record.native``)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "seglake_native",
            ["seglake_native.c"],
            define_macros=[("SEGLAKE_PYTHON_MODULE", "1")],
            extra_compile_args=["-O3"],
        )
    ]
)
