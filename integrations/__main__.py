"""``python -m pb_accountant.integrations`` runs the ``pb-accountant`` command line."""
import sys

from .cli import main

sys.exit(main())
