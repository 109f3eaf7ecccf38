"""One folder per competition: everything the benchmark knows about it that is code.

``<challenge>/grade.py`` holds the graders, ``synthetic.py`` the generators of the synthetic twins,
``prepare.py`` the preparers of the real release and ``source.py`` the facts about its raw files (which
archives, how each is recognised). task.yaml names them as ``<challenge>:<attribute>`` and
:func:`pytest_rexmle.task.resolve` imports them on first use, so a new challenge is this folder plus
its ``tasks/<id>/`` folders, with no table to edit. Shared machinery stays outside: metrics in
:mod:`pytest_rexmle.metrics`, grader bases in :mod:`pytest_rexmle.graders`, twin and prepare helpers in
:mod:`pytest_rexmle.data`.
"""
