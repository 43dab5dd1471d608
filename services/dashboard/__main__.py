"""python -m services.dashboard: the dashboard and merged /metrics (see app.py).

Environment: GPULEDGER_NATS_URL (a user that may read the log and send queries: `ops`),
GPULEDGER_DASHBOARD_PORT (default 8080), GPULEDGER_DASHBOARD_HOST (default 127.0.0.1),
GPULEDGER_METRICS_TARGETS (`name=url,...` of the /metrics to merge; `gpuledger up` sets it),
GPULEDGER_DASHBOARD_TOKEN (its login; required to bind anything but loopback: login.py).
"""

import sys

from services.dashboard.main import main

sys.exit(main())
