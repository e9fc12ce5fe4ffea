"""Sphinx configuration of meshsim's documentation site (docs/index.md says why Sphinx).

Build it with `python -m sphinx -W -b html docs docs/_build/html`.
"""

project = "meshsim"
author = "meshsim contributors"
extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
html_theme = "furo"
html_title = "meshsim"
exclude_patterns = ["_build"]
# Headings down to ####, so that links such as [text](mesh.md#one-cycle) resolve.
myst_heading_anchors = 4
