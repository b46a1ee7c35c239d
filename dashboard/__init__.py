"""The Streamlit dashboard (docs/architecture.md): it arrives with the dashboard step."""
