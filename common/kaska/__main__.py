"""`python -m common.kaska ...`: see common/kaska/cli.py."""

import sys

from common.kaska.cli import main

sys.exit(main())
