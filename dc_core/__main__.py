"""``python -m dc_core`` is the ``deepcontext`` command."""

import sys

from dc_core.cli import main

sys.exit(main())
