"""The task catalog: registering tasks and versioning their configs."""
