"""python -m services.node_agent: see services/node_agent/app.py."""

import sys

from services.node_agent.app import main

sys.exit(main())
