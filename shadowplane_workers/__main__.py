"""`python -m shadowplane_workers worker|beat ...`: Celery's own program on the app (`shadowplane worker`
and `shadowplane beat` become it), its logging set up before Celery says anything, so that
its first words (a warning at start-up) are JSON lines too, and without its text banners."""

from __future__ import annotations

import sys

import celery.apps.worker
from celery.__main__ import main

from controlplane.settings import get_settings
from shadowplane_workers import logs

if __name__ == "__main__":
    logs.configure(get_settings().log_level)
    celery.apps.worker.safe_say = logs.say
    sys.argv = ["celery", "-A", "shadowplane_workers.app", "--quiet", *sys.argv[1:]]
    main()
