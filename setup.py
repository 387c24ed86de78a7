"""Only the C extension lives here; everything else is in pyproject.toml.

``exporter._scan`` is the bulk scanner of busy SGLang logs. It is optional: without a C compiler
the install still succeeds and the pure-Python scanner (exporter/scan.py) runs instead, slower.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("exporter._scan", ["exporter/_scan.c"], optional=True)])
