"""audit page (being built)."""

from __future__ import annotations

import streamlit as st

from dashboard import common

principal = common.require("read")
st.title("audit")
