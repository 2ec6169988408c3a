"""``python -m kafleet``: the same command line as the ``kafleet`` console script."""

from kafleet.cli.main import main

raise SystemExit(main())
