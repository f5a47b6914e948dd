"""``python -m air_migrate``: the same as the ``air-migrate`` command."""

from air_migrate.cli import main

raise SystemExit(main())
