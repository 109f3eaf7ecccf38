"""Building blocks of the local runtime's sandbox (see ``pytest_rexmle.runtime.local``).

``probe`` picks a mechanism that works here, ``bwrap`` and ``landlock`` describe the agent's view for
each, ``identity`` the uid it runs as, ``seccomp`` the syscall filter, ``limits`` resource limits, and
``launcher`` is the agent's first process, which applies all of them before the agent's code runs.
"""
