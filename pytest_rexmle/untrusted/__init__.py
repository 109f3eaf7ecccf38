"""Untrusted input: everything an agent left behind, read as the hostile input it is.

``files``: bounded, non-following reads of agent-written files, the run folder's scrub, bounded JSON and
clean text for reasons; ``submission``: the submission rules every task shares, read through ``files``.
"""
