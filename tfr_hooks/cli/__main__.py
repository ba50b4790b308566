"""``python -m tfr_hooks.cli``: the ``tfr-hooks`` command."""

import sys

from tfr_hooks.cli import main

__all__: list[str] = []

sys.exit(main())
