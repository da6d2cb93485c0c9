"""``python -m cli``: the same as the ``shockwave`` command."""

from cli.main import main

raise SystemExit(main())
