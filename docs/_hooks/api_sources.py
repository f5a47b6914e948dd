"""MkDocs hook: let mkdocstrings read ``databricks.air`` from its sources.

The package lives in ``databricks_air/`` and is installed as ``databricks.air`` through a setuptools mapping, which
griffe (mkdocstrings' source reader) cannot follow. This hook lays out ``build/docs-api-src/databricks/air`` as a
link to ``databricks_air/`` before the build, and ``mkdocs.yml`` adds that folder to the handler's search paths.

The ``databricks`` folder there has an ``__init__.py`` on purpose: it makes griffe stop at this folder instead of
collecting every portion of the ``databricks`` namespace, which would make it read all of ``databricks-sdk``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from mkdocs.plugins import event_priority

SOURCES = Path("build") / "docs-api-src"


def api_source_root(project_root: Path) -> Path:
    """Create (or refresh) the ``databricks/air`` layout under ``project_root/build`` and return its root."""
    root = project_root / SOURCES
    package = root / "databricks"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text('"""Stand-in for the databricks namespace, for the docs build only."""\n')
    link = package / "air"
    target = os.path.relpath(project_root / "databricks_air", package)
    if link.is_symlink() and os.readlink(link) == target:
        return root
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target, target_is_directory=True)
    return root


@event_priority(100)  # before mkdocstrings reads its handler settings
def on_config(config: Any) -> Any:
    """Lay out the sources next to ``mkdocs.yml``."""
    api_source_root(Path(config.config_file_path).resolve().parent)
    return config
