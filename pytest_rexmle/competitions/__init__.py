"""One folder per competition: its code and its tasks, everything the benchmark knows about it.

``<competition>/grade.py`` holds the graders, ``synthetic.py`` the generators of the synthetic twins,
``prepare.py`` the preparers of the real release, ``source.py`` the facts about its raw files (which
archives, how each is recognised) and ``tasks/<id>/`` one folder per task (``task.yaml``,
``leaderboard.csv``, ``description.md``). task.yaml names the code as ``<competition>:<attribute>`` and
:func:`pytest_rexmle.task.resolve` imports it on first use, so a new competition is this one folder, with
no table to edit (docs/extending/competition.md). Shared machinery stays outside: metrics in
:mod:`pytest_rexmle.metrics`, grader bases in :mod:`pytest_rexmle.graders`, twin and prepare helpers in
:mod:`pytest_rexmle.data`.
"""
