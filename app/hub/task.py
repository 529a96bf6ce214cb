"""The old home of the progress-and-cancel token, now app.task (it is no Hub part: installs, quality runs and the
service's jobs take it too). Kept only for app.service.control.library_ops, which is being changed elsewhere."""

from app.task import Progress, Stopped, TaskState

__all__ = ["Progress", "Stopped", "TaskState"]
