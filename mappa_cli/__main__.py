import sys

from mappa_cli.main import main

sys.exit(main())
