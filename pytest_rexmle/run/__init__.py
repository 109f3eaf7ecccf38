"""One agent run on one task: beginning it (``begin``: resume a finished result, re-attach to one in flight, or
launch), its folder, contract and runtime call (``launch``), the instructions the agent receives
(``instructions``) and which harness process owns it while it is unfinished (``owner``).
"""
