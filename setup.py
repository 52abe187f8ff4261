"""The transports' compiled helpers (transports/native/*.pyx), built with Cython against
ISA-L (Debian's libisal-dev): everything else of the project is in pyproject.toml.
scripts/setup.sh builds them (the editable install builds extensions in place);
``make native`` rebuilds them after a change."""

from Cython.Build import cythonize
from setuptools import Extension, setup

EXTENSIONS = [
    Extension("transports.native.packet", ["transports/native/packet.pyx"],
              libraries=["isal"], extra_compile_args=["-O2"]),
    Extension("transports.native.batchio", ["transports/native/batchio.pyx"],
              include_dirs=["transports/native"], extra_compile_args=["-O2"]),
]

setup(ext_modules=cythonize(EXTENSIONS, compiler_directives={"language_level": "3"},
                            quiet=True))
