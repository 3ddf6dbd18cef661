"""Builds the optional C kernel ``seglake_native`` (``native/seglake_native.c``), a
top-level module next to the package; everything else is in pyproject.toml. A failed
build is not an error: seglake then runs its numpy code (``seglake.record.native``)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "seglake_native",
            ["native/seglake_native.c"],
            define_macros=[("SEGLAKE_PYTHON_MODULE", "1")],
            extra_compile_args=["-O3"],
            optional=True,
        )
    ]
)
