"""The Streamlit dashboard (`shadowplane dashboard`): what SREs and reviewers work in.

It reads and writes only through `controlplane`'s services and actions, so every change
made here is validated, audited and announced exactly as one made through the API."""
