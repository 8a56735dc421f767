import sys

from core.checkpoint._cli import main

sys.exit(main())
