"""``python -m toolkit.tools.regress``: the same as ``python -m toolkit regress``."""
import sys

from .cli import main

sys.exit(main())
