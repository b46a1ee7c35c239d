"""Rollout decisions (docs/evidence.md): verdicts per closed window, should_rollback, stages
and flags."""
