"""Workspace snapshots and rewinds: what an agent changed on disk, taken back.

:mod:`tether.rewind.store` keeps a workspace's snapshots in a private git
object store; :mod:`tether.rewind.plan` reads a session's
``workspace/snapshot`` events and decides what a rewind to a turn restores,
what it cannot, and which files were changed outside the agent since.
"""
