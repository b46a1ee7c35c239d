"""The Streamlit dashboard (DESIGN §8): it arrives with the dashboard step."""
