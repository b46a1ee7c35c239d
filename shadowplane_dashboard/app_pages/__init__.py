"""The dashboard pages, one script per screen (run by st.navigation)."""
