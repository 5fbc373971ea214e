"""Delegation: running the slow tier in the background and delivering its answer later."""

from rtgate.delegate.base import Job, JobQueue, JobStore, new_job_id
from rtgate.delegate.inprocess import InProcessQueue

__all__ = ["InProcessQueue", "Job", "JobQueue", "JobStore", "new_job_id"]
