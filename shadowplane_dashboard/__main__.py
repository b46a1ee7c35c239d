"""`python -m shadowplane_dashboard run <script> [options]`: Streamlit's own program (`shadowplane
dashboard` becomes it), with every line it logs, Streamlit's and uvicorn's included, in the
JSON lines of the API and the workers."""

from __future__ import annotations

import logging
import signal
from types import FrameType
from typing import NoReturn

import streamlit.logger
import uvicorn.config
from streamlit.web.cli import main

from controlplane.logs import configure_process, uvicorn_log_config
from controlplane.settings import get_settings


def _to_root(logger: logging.Logger) -> None:
    """Streamlit's loggers pass their records on to the root logger's JSON lines instead of
    printing their own text (this replaces `streamlit.logger.setup_formatter`)."""
    handler = getattr(logger, "streamlit_console_handler", None)
    if handler is not None:
        logger.removeHandler(handler)
        del logger.streamlit_console_handler  # type: ignore[attr-defined]
    logger.propagate = True


def _stopped(signum: int, _: FrameType | None) -> NoReturn:
    """Ctrl-C, raised again by uvicorn once it has stopped serving: a quiet exit with the
    shell's status for it (130, as `shadowplane api`), not Streamlit's click program's
    KeyboardInterrupt ("Aborted!" in plain text, status 1)."""
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _stopped)
    level = get_settings().log_level
    configure_process(level)
    streamlit.logger.setup_formatter = _to_root
    streamlit.logger.update_formatter()
    # Streamlit serves with uvicorn under uvicorn's default log config: that default is made
    # ours (in place: it is the default value of uvicorn.Config's argument).
    uvicorn.config.LOGGING_CONFIG.clear()
    uvicorn.config.LOGGING_CONFIG.update(uvicorn_log_config(level))
    main(prog_name="streamlit")
