"""ORM tables, grouped by domain. Importing this package registers them all on `Base.metadata`."""

from controlplane.models.audit import AuditEntry
from controlplane.models.auth import ApiKey, DashboardSession
from controlplane.models.base import Base
from controlplane.models.evalsets import EvalItem, EvalLayerDigest, EvalRun
from controlplane.models.metrics import Alert, ScanMark, TaskGrade, Window, WindowMetrics
from controlplane.models.outbox import OutboxEvent, WebhookDelivery
from controlplane.models.results import Payload, Result, ResultKey
from controlplane.models.review import ReviewItem, ReviewLabel, ReviewSkip, RouteAccuracyWindow
from controlplane.models.rollout import BlockedModel, Decision, Flag, FlagHistory, FlagState
from controlplane.models.secrets import ServerSecret
from controlplane.models.tasks import ConfigHold, FailingEvaluation, Task, TaskConfigVersion

__all__ = [
    "Alert",
    "ApiKey",
    "AuditEntry",
    "Base",
    "BlockedModel",
    "DashboardSession",
    "Decision",
    "EvalItem",
    "EvalLayerDigest",
    "EvalRun",
    "ConfigHold",
    "FailingEvaluation",
    "Flag",
    "FlagHistory",
    "FlagState",
    "OutboxEvent",
    "Payload",
    "Result",
    "ResultKey",
    "ReviewItem",
    "ReviewLabel",
    "ReviewSkip",
    "RouteAccuracyWindow",
    "ScanMark",
    "ServerSecret",
    "Task",
    "TaskGrade",
    "TaskConfigVersion",
    "WebhookDelivery",
    "Window",
    "WindowMetrics",
]
