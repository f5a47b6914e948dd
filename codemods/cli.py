"""The ``air-migrate`` command line."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``air-migrate``; the transforms arrive with their own issue."""
    print("air-migrate: not implemented yet", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
