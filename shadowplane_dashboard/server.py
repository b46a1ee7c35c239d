"""The dashboard's server: the Streamlit app (streamlit_app.py) behind its sign-in door
(signin.py), its pages loaded as shell.py serves them, as one ASGI app. `shadowplane
dashboard` runs it with `streamlit run`."""

from __future__ import annotations

from pathlib import Path

import streamlit as st
from starlette.middleware import Middleware

from controlplane.logs import configure_logging
from controlplane.settings import Settings
from shadowplane_dashboard import shell, signin

# Sign-ins and sign-outs are logged, one JSON line each, as the API logs its requests.
configure_logging(Settings().log_level)

app = st.App(
    Path(__file__).with_name("streamlit_app.py"),
    routes=[*signin.ROUTES, *shell.ROUTES],
    middleware=[Middleware(signin.SessionGate)],
)
