"""Rollout decisions (DESIGN §4): verdicts per closed window, should_rollback, stages and flags."""
