"""The project's version: declared once, in pyproject.toml, and read from the installed package's metadata.

The chart (a unit test pins Chart.yaml to it), the image tags (e2e/images/build.sh) and `floodway --version` use it.
"""

from importlib.metadata import version

__version__ = version("floodway")
