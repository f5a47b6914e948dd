"""Whether the caller runs in a Jupyter kernel, and showing a link the way that suits it.

In a kernel, a link is shown as HTML in the cell (the run's page, Ray's dashboard); elsewhere (a script, a
terminal, a CI log) as a plain line on stderr.
"""

from __future__ import annotations

import sys
from typing import Any, Dict, Optional


def ipython_shell() -> Optional[Any]:
    """The running IPython shell (a Jupyter kernel's, or a terminal IPython's), else ``None``; never imports IPython:
    a process that runs IPython has imported it already."""
    get_ipython = getattr(sys.modules.get("IPython"), "get_ipython", None)
    return get_ipython() if get_ipython is not None else None


def kernel_shell() -> Optional[Any]:
    """The IPython shell when this process is a Jupyter kernel, else ``None`` (never imports IPython itself)."""
    if "ipykernel" not in sys.modules:
        return None
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    return shell if shell is not None and getattr(shell, "kernel", None) is not None else None


def in_jupyter_kernel() -> bool:
    return kernel_shell() is not None


def show(html: str, line: str, metadata: Optional[Dict[str, Any]] = None) -> None:
    """Show ``html`` in the cell (with display ``metadata``) in a Jupyter kernel; elsewhere ``line``, on stderr."""
    if not in_jupyter_kernel():
        print(line, file=sys.stderr, flush=True)
        return
    from IPython.display import HTML, display

    display(HTML(html), metadata=metadata)
