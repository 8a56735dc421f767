import sys

from core.plugins._cli import main

sys.exit(main())
