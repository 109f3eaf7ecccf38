"""pytest-rexmle: the ReX-MLE medical-imaging agent benchmark as a pytest plugin.

The flow a reader should follow through the package:
task (``task.py``; ``competitions/<competition>/tasks/<id>/``) -> data (``data/``; per competition
``competitions/<competition>/synthetic.py`` and ``prepare.py``) -> runtime + agent (``runtime/``, ``agents/``)
-> submission (``submission.py``) -> grader (``competitions/<competition>/grade.py`` on ``graders/``) ->
ranking (``scoring/``) -> report (``report/``).
"""

__version__ = "0.1.0"
